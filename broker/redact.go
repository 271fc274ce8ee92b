package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces a secret the upstream echoed in a response body.
const Redacted = "[REDACTED]"

// redactor finds secret values in what the upstream answers and replaces
// them. It looks for every form of a secret an echoing upstream commonly
// produces, without regard to ASCII case (a lower- or upper-cased echo, hex
// in either case, %2f or %2F):
//
//   - the value itself, JSON-escaped (with and without HTML escaping),
//     HTML-escaped (an error page quoting it) and URL-escaped (query and
//     path);
//   - hex;
//   - base64 (standard and URL alphabets): the part of the encoding that
//     depends on the secret alone, at each of the 3 alignments it can have
//     inside a longer encoded text, so that base64 of "Bearer <secret>" or
//     of a JSON blob holding it is caught too (at most 2 bytes at each end of
//     the secret stay mixed with their neighbours' bits).
//
// The rendered header values of the call ("Bearer <secret>") are looked for
// too, so that an echo of the header is replaced as one.
//
// Only whole forms are redacted, never a piece of a secret: an upstream
// that echoes what the job sends (an error quoting a parameter) would turn
// a redacted piece into an oracle, the job guessing a known prefix
// ("ghp_") one byte further at a time (TestNoPieceOracle). So a secret
// hashed, encrypted, split by the upstream into fields, or handed out in
// pieces by the upstream's own pagination is not found: docs/broker.md says
// which grants that rules out.
type redactor struct {
	forms  [][]byte // ASCII lower case, longest first, deduplicated
	maxLen int      // the longest form: a stream carries maxLen-1 bytes across writes
}

// newRedactor builds a redactor of secrets (values the box must never
// see) and rendered (the call's injected header values). Empty values are
// skipped.
func newRedactor(secrets, rendered []string) *redactor {
	r := &redactor{}
	var all []string
	for _, v := range secrets {
		all = append(all, secretForms(v)...)
	}
	for _, v := range rendered {
		all = append(all, textForms(v)...)
	}
	for i := range all {
		all[i] = lowerString(all[i])
	}
	slices.SortFunc(all, func(a, b string) int { // longest first, equal ones together
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	for _, f := range slices.Compact(all) {
		if f != "" {
			r.forms = append(r.forms, []byte(f))
			r.maxLen = max(r.maxLen, len(f))
		}
	}
	return r
}

// textForms are v as it is, JSON-, HTML- and URL-escaped.
func textForms(v string) []string {
	return []string{v, jsonEscape(v, true), jsonEscape(v, false), html.EscapeString(v), url.QueryEscape(v), url.PathEscape(v)}
}

// secretForms are textForms, hex, and the base64 cores of v.
func secretForms(v string) []string {
	out := append(textForms(v), hex.EncodeToString([]byte(v)))
	for o := 0; o < 3 && o < len(v); o++ {
		n := (len(v) - o) / 3 * 3
		if n < 3 {
			continue
		}
		core := []byte(v[o : o+n])
		out = append(out, base64.StdEncoding.EncodeToString(core), base64.URLEncoding.EncodeToString(core))
	}
	return out
}

// jsonEscape is v as it appears inside a JSON string.
func jsonEscape(v string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(v)
	s := strings.TrimSuffix(b.String(), "\n")
	return strings.TrimSuffix(strings.TrimPrefix(s, `"`), `"`)
}

// lowerASCII lower-cases the ASCII letters of b into dst (reused), leaving
// every other byte as it is: the length never changes, unlike
// bytes.ToLower on invalid UTF-8.
func lowerASCII(dst, b []byte) []byte {
	dst = append(dst[:0], b...)
	for i, c := range dst {
		if 'A' <= c && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	return dst
}

func lowerString(s string) string { return string(lowerASCII(nil, []byte(s))) }

// contains reports whether s holds a secret.
func (r *redactor) contains(s string) bool {
	_, n := r.bytes([]byte(s))
	return n > 0
}

func (r *redactor) containsAny(vs []string) bool {
	return slices.ContainsFunc(vs, r.contains)
}

// bytes redacts b as one whole answer, returning the result and the number
// of redactions.
func (r *redactor) bytes(b []byte) ([]byte, int) {
	var out bytes.Buffer
	s := r.stream(&out)
	_, _ = s.Write(b)
	_ = s.Close()
	if s.n == 0 {
		return b, 0
	}
	return out.Bytes(), s.n
}

// string is bytes for a string.
func (r *redactor) string(s string) string {
	out, n := r.bytes([]byte(s))
	if n == 0 {
		return s
	}
	return string(out)
}

// stream returns a writer that redacts one answer written to it in any
// pieces (Close ends it) and writes the result to w.
func (r *redactor) stream(w io.Writer) *stream {
	return &stream{r: r, w: w, until: -1}
}

// stream redacts a body that arrives in pieces, with the same result as
// redacting it whole (FuzzStream). Every occurrence of every form is
// found, and the union of their spans is replaced: overlapping or touching
// spans become one Redacted. A span is decided once the bytes it could
// extend over have arrived, so the stream holds back at most maxLen-1
// bytes (plus the current write) and never the whole body; Close decides
// the rest, so a secret at the very start or end of a body, or cut by any
// read, is found like any other.
type stream struct {
	r     *redactor
	w     io.Writer
	buf   []byte // the input not yet decided, from offset off
	low   []byte // scratch: buf in lower case
	off   int64  // the body offset of buf[0]
	done  int64  // the body offset up to which output was written
	until int64  // the end of the last redaction (-1: none yet)
	n     int    // redactions written
	err   error
}

// span is a part of buf to redact, [start, end).
type span struct{ start, end int }

func (s *stream) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	s.flush(false)
	return len(p), s.err
}

// Close decides the rest of the body and writes it.
func (s *stream) Close() error {
	if s.err == nil {
		s.flush(true)
	}
	return s.err
}

// flush writes out what can be decided: everything at the end of the body
// (final), else every byte that no later input can make part of a span.
func (s *stream) flush(final bool) {
	limit := len(s.buf)
	if !final {
		limit = len(s.buf) - max(s.r.maxLen-1, 0) // a span starting before limit ends within buf
		if limit <= 0 {
			return
		}
	}
	s.low = lowerASCII(s.low, s.buf)
	spans := s.r.find(s.low, limit)
	for _, sp := range spans {
		a, b := s.off+int64(sp.start), s.off+int64(sp.end)
		if s.until >= a { // overlaps or touches the last redaction
			s.until = max(s.until, b)
			continue
		}
		s.text(a)
		s.put([]byte(Redacted))
		s.n++
		s.until, s.done = b, a
	}
	s.text(s.off + int64(limit))
	s.done = max(s.done, s.off+int64(limit))
	s.buf = s.buf[:copy(s.buf, s.buf[limit:])]
	s.off += int64(limit)
}

// text writes the input from where output stopped (or the last redaction
// ended) up to the body offset to.
func (s *stream) text(to int64) {
	from := max(s.done, s.until)
	if from < to {
		s.put(s.buf[from-s.off : to-s.off])
	}
	s.done = max(s.done, to)
}

func (s *stream) put(p []byte) {
	if s.err == nil {
		_, s.err = s.w.Write(p)
	}
}

// find returns the spans of low to redact that start before limit, sorted
// by start: every occurrence of every form, overlapping ones included.
func (r *redactor) find(low []byte, limit int) []span {
	var spans []span
	for _, f := range r.forms {
		for at := 0; at < limit; {
			j := bytes.Index(low[at:], f)
			if j < 0 || at+j >= limit {
				break
			}
			spans = append(spans, span{at + j, at + j + len(f)})
			at += j + 1
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	return spans
}
