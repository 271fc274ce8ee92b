package broker

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Redacted replaces a secret the upstream echoed in a response body.
const Redacted = "[REDACTED]"

// redactor finds and replaces secret values and their usual encodings in a
// response (as they are, JSON-escaped, URL-escaped), longest first. It
// cannot find a secret the upstream transformed in other ways (hashed,
// base64-encoded on its own, split): docs/broker.md says so.
type redactor struct {
	olds [][]byte
}

// newRedactor builds a redactor of values; empty values are skipped (every
// secret is at least MinSecretLen bytes: secrets.go).
func newRedactor(values []string) *redactor {
	var all []string
	add := func(v string) {
		if v != "" && !slices.Contains(all, v) {
			all = append(all, v)
		}
	}
	for _, v := range values {
		add(v)
		add(jsonEscape(v, true))
		add(jsonEscape(v, false))
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
	}
	slices.SortFunc(all, func(a, b string) int { return len(b) - len(a) })
	r := &redactor{olds: make([][]byte, len(all))}
	for i, v := range all {
		r.olds[i] = []byte(v)
	}
	return r
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

func (r *redactor) contains(s string) bool {
	for _, o := range r.olds {
		if strings.Contains(s, string(o)) {
			return true
		}
	}
	return false
}

func (r *redactor) containsAny(vs []string) bool {
	return slices.ContainsFunc(vs, r.contains)
}

// bytes replaces every secret in b with Redacted, returning the result and
// the number of replacements.
func (r *redactor) bytes(b []byte) ([]byte, int) {
	n := 0
	for _, o := range r.olds {
		if c := bytes.Count(b, o); c > 0 {
			n += c
			b = bytes.ReplaceAll(b, o, []byte(Redacted))
		}
	}
	return b, n
}

// string is bytes for a string.
func (r *redactor) string(s string) string {
	out, n := r.bytes([]byte(s))
	if n == 0 {
		return s
	}
	return string(out)
}
