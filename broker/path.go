package broker

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
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
// percent-escape; an escape of '/', '\', '%', '.'-only segments, a control
// byte or NUL (which an upstream may decode again and read as a separator,
// a second escape, or a traversal); a segment of dots only, with or without
// ";parameters" ("." , "..", "..;x": traversal on some servers); and an
// empty segment ("//") anywhere but at the end.
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
		d, err := url.PathUnescape(rs)
		if err != nil {
			return target{}, &targetError{fmt.Sprintf("path has a malformed percent-escape in segment %d", i+1)}
		}
		if strings.ContainsAny(d, "/\\%") || strings.ContainsFunc(d, isControl) {
			return target{}, &targetError{fmt.Sprintf("path segment %d hides '/', '\\', '%%' or a control character in a percent-escape", i+1)}
		}
		if base, _, _ := strings.Cut(d, ";"); base != "" && strings.Trim(base, ".") == "" {
			return target{}, &targetError{fmt.Sprintf("path segment %d is a dot segment (%q): traversal is refused, send the path it resolves to", i+1, short(rs))}
		}
		if d == "" && i != len(rawSegs)-1 {
			return target{}, &targetError{fmt.Sprintf("path has an empty segment (//) at segment %d", i+1)}
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

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

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
		keys = append(keys, shorten(k, 64))
	}
	sort.Strings(keys)
	return keys
}

const maxQueryKeys = 16

// short quotes s for a message, cut to 80 bytes: the box chose it.
func short(s string) string { return fmt.Sprintf("%q", shorten(s, 80)) }

// shorten cuts s to at most n bytes (on a rune boundary), marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
