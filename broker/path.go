package broker

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/paddockhq/paddock/job"
)

// target is a box's request-target, checked: the path decoded (for the
// grant's patterns and the record) and as the box escaped it (what goes
// upstream), and the raw query.
type target struct {
	path     string   // decoded, starts with '/'
	escaped  string   // the box's escaping of path
	segs     []string // decoded segments, without a trailing empty one
	rawQuery string
}

// targetError is why a request-target was refused.
type targetError struct{ msg string }

// cleanTarget checks a request-target. It refuses rather than rewrites: a
// path the broker would have to normalise is one an upstream might read
// differently. Refused are: any form but origin-form ("/path?query"), so no
// absolute URL and no authority; a byte outside RFC 3986's path and query
// characters (spaces, controls, backslashes, raw non-ASCII); a malformed
// percent-escape; and, in a path segment decoded once (checkSegment), an
// escape of '/', '\', '%', a control byte or NUL (which an upstream may
// decode again and read as a separator, a second escape, or a traversal),
// an escape of an unreserved character (non-canonical: "%2e" is '.'),
// bytes that are not UTF-8 (overlong forms such as %C0%AF for '/' and
// %C0%AE for '.', which lenient decoders accept), a look-alike of '/', '\'
// or '%', a segment of dots only or their look-alikes, with or without
// ";parameters" ("." , "..", "..;x", "\uFF0E\uFF0E": traversal on some
// servers); and an empty segment ("//") anywhere but at the end.
func cleanTarget(uri string) (target, *targetError) {
	if !strings.HasPrefix(uri, "/") {
		return target{}, &targetError{fmt.Sprintf("request target %s is not a path: absolute URLs and authority forms are refused, send GET /path with Host: <grant>", short(uri))}
	}
	esc, q, _ := strings.Cut(uri, "?")
	if bad := firstBad(esc, false); bad >= 0 {
		return target{}, &targetError{fmt.Sprintf("path has a character the broker does not accept (byte %#02x at %d): percent-encode it", esc[bad], bad)}
	}
	if bad := firstBad(q, true); bad >= 0 {
		return target{}, &targetError{fmt.Sprintf("query has a character the broker does not accept (byte %#02x at %d): percent-encode it", q[bad], bad)}
	}
	t := target{escaped: esc, rawQuery: q}
	rawSegs := strings.Split(esc[1:], "/")
	dec := make([]string, len(rawSegs))
	for i, rs := range rawSegs {
		d, msg := checkSegment(rs)
		if msg == "" && d == "" && i != len(rawSegs)-1 {
			msg = "is an empty segment (//)"
		}
		if msg != "" {
			return target{}, &targetError{fmt.Sprintf("path segment %d %s", i+1, msg)}
		}
		dec[i] = d
	}
	t.path = "/" + strings.Join(dec, "/")
	t.segs = dec
	if n := len(dec); dec[n-1] == "" {
		t.segs = dec[:n-1]
	}
	return t, nil
}

// checkSegment decodes one path segment (as the box escaped it), once, and
// returns it, or why it is refused.
func checkSegment(rs string) (string, string) {
	for i := 0; i+2 < len(rs); i++ { // firstBad checked every escape's form
		if rs[i] == '%' && isUnreserved(unhex(rs[i+1])<<4|unhex(rs[i+2])) {
			return "", fmt.Sprintf("percent-encodes an unreserved character (%s): send it as it is", rs[i:i+3])
		}
	}
	d, err := url.PathUnescape(rs)
	switch {
	case err != nil:
		return "", "has a malformed percent-escape"
	case !utf8.ValidString(d):
		return "", "is not UTF-8 once decoded (an overlong or broken sequence such as %C0%AF): escape the UTF-8 bytes of each character"
	case strings.ContainsAny(d, "/\\%") || strings.ContainsFunc(d, unicode.IsControl):
		return "", "hides '/', '\\', '%' or a control character in a percent-escape"
	case strings.ContainsAny(d, lookalikeSeparators):
		return "", "holds a look-alike of '/', '\\' or '%' that an upstream may normalise into one"
	}
	if base, _, _ := strings.Cut(foldDots.Replace(d), ";"); base != "" && strings.Trim(base, ".") == "" {
		return "", fmt.Sprintf("is a dot segment (%q): traversal is refused, send the path it resolves to", short(rs))
	}
	return d, ""
}

// lookalikeSeparators are characters whose Unicode compatibility form
// (NFKC, which some frameworks apply to paths) is '/', '\' or '%'.
const lookalikeSeparators = "\uFF0F\u2215\u2044\u29F8\uFE68\uFF3C\u29F9\uFF05\uFE6A"

// foldDots maps the look-alikes of '.' to the dots of their compatibility
// form, for the dot-segment rule ("\uFF0E\uFF0E" is ".." after NFKC).
var foldDots = strings.NewReplacer("\uFF0E", ".", "\u2024", ".", "\uFE52", ".", "\u2025", "..", "\u2026", "...")

// isUnreserved reports whether c is an RFC 3986 unreserved character,
// which a canonical URI never percent-encodes.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// firstBad is the index of the first byte of s that may not appear in a
// path (or a query), or of a malformed percent-escape; -1 if none.
func firstBad(s string, query bool) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0:
		case query && c == '?':
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return i
			}
		default:
			return i
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// upstreamURL is the grant's base URL with t's path and query under it.
func (t target) upstreamURL(base *url.URL) *url.URL {
	u := *base
	u.Path = base.Path + t.path
	u.RawPath = base.EscapedPath() + t.escaped
	u.RawQuery = t.rawQuery
	u.ForceQuery = false
	return &u
}

// queryKeys are the names of t's query parameters, sorted, without values
// (the record keeps no query value: it may carry the job's data).
func (t target) queryKeys() []string {
	if t.rawQuery == "" {
		return nil
	}
	vs, _ := url.ParseQuery(t.rawQuery)
	keys := make([]string, 0, len(vs))
	for k := range vs {
		if len(keys) == maxQueryKeys {
			keys = append(keys, "…")
			break
		}
		keys = append(keys, job.Truncate(k, 64))
	}
	sort.Strings(keys)
	return keys
}

const maxQueryKeys = 16

// short quotes s for a message, cut to 80 bytes: the box chose it.
func short(s string) string { return fmt.Sprintf("%q", job.Truncate(s, 80)) }
