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

// MinPiece is the shortest piece of a secret's form the broker redacts at
// the edge of an answer (a body, a header value): an answer that starts
// with the end of a secret, ends with its start, or is a slice of its
// middle, as an upstream that cuts a resource in pages would give it.
const MinPiece = 4

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
//     the secret stay mixed with their neighbours' bits);
//   - at the edges of an answer, a piece of any of those forms of at least
//     MinPiece bytes (see stream).
//
// The rendered header values of the call ("Bearer <secret>") are looked for
// whole (as they are, JSON-, HTML- and URL-escaped), so that an echo of the header
// is replaced as one; they have no edge pieces (their literal text would
// match ordinary words). A secret hashed, encrypted, split by the upstream
// into fields, or cut into pieces below MinPiece is not found:
// docs/broker.md says which grants that rules out.
type redactor struct {
	forms  [][]byte // ASCII lower case, longest first, deduplicated
	piece  []bool   // forms[i] is a form of a secret (its edge pieces are redacted)
	maxLen int      // the longest form: a stream carries maxLen-1 bytes across writes
}

// newRedactor builds a redactor of secrets (values the box must never
// see, with their edge pieces) and rendered (the call's injected header
// values, looked for whole). Empty values are skipped.
func newRedactor(secrets, rendered []string) *redactor {
	r := &redactor{}
	seen := map[string]int{}
	add := func(v string, piece bool) {
		if v == "" {
			return
		}
		k := lowerString(v)
		if i, ok := seen[k]; ok {
			r.piece[i] = r.piece[i] || piece
			return
		}
		seen[k] = len(r.forms)
		r.forms = append(r.forms, []byte(k))
		r.piece = append(r.piece, piece)
	}
	for _, v := range secrets {
		for _, f := range secretForms(v) {
			add(f, true)
		}
	}
	for _, v := range rendered {
		for _, f := range textForms(v) {
			add(f, false)
		}
	}
	idx := make([]int, len(r.forms))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return len(r.forms[b]) - len(r.forms[a]) })
	forms, piece := make([][]byte, len(idx)), make([]bool, len(idx))
	for i, j := range idx {
		forms[i], piece[i] = r.forms[j], r.piece[j]
		r.maxLen = max(r.maxLen, len(forms[i]))
	}
	r.forms, r.piece = forms, piece
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

// contains reports whether s holds a secret (or an edge piece of one).
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
// bytes (plus the current write) and never the whole body.
//
// Edges: until the first maxLen bytes have arrived (or the body ended)
// nothing is written, so that a body that starts with the end of a form
// (at least MinPiece bytes of it) has that piece redacted; at Close, a
// body that ends with the start of a form, or that is as a whole a slice
// of one, has it redacted too.
type stream struct {
	r       *redactor
	w       io.Writer
	buf     []byte // the input not yet decided, from offset off
	low     []byte // scratch: buf in lower case
	off     int64  // the body offset of buf[0]
	done    int64  // the body offset up to which output was written
	until   int64  // the end of the last redaction (-1: none yet)
	started bool   // the body's start was checked
	n       int    // redactions written
	err     error
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
		// A span starting before limit ends within buf. Before the first
		// flush buf holds at least maxLen bytes, so the start edge is known.
		limit = len(s.buf) - (s.r.maxLen - 1)
		if limit <= 0 {
			return
		}
	}
	s.low = lowerASCII(s.low, s.buf)
	spans := s.r.find(s.low, limit, !s.started, final)
	s.started = true
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
// by start: every occurrence of every form, and with start (low begins the
// body) or end (low ends it) the edge pieces.
func (r *redactor) find(low []byte, limit int, start, end bool) []span {
	var spans []span
	for i, f := range r.forms {
		for at := 0; at < limit; {
			j := bytes.Index(low[at:], f)
			if j < 0 || at+j >= limit {
				break
			}
			spans = append(spans, span{at + j, at + j + len(f)})
			at += j + 1
		}
		if !r.piece[i] {
			continue
		}
		if start {
			if l := overlap(f, low[:min(len(low), len(f))]); l >= MinPiece {
				spans = append(spans, span{0, l})
			}
		}
		if start && end && len(low) >= MinPiece && bytes.Contains(f, low) {
			spans = append(spans, span{0, len(low)})
		}
		if end {
			if l := overlap(low[max(0, len(low)-len(f)):], f); l >= MinPiece {
				spans = append(spans, span{len(low) - l, len(low)})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	return spans
}

// overlap is the length of the longest suffix of text that is a prefix of
// pat (Knuth–Morris–Pratt).
func overlap(text, pat []byte) int {
	if len(pat) == 0 {
		return 0
	}
	pi := make([]int, len(pat))
	for i, k := 1, 0; i < len(pat); i++ {
		for k > 0 && pat[i] != pat[k] {
			k = pi[k-1]
		}
		if pat[i] == pat[k] {
			k++
		}
		pi[i] = k
	}
	k := 0
	for _, c := range text {
		if k == len(pat) {
			k = pi[k-1]
		}
		for k > 0 && c != pat[k] {
			k = pi[k-1]
		}
		if c == pat[k] {
			k++
		}
	}
	return k
}
