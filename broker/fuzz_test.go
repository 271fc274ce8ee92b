package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCleanTarget(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]string{
		"/":                       "/",
		"/a/b":                    "/a/b",
		"/a/b/":                   "/a/b/",
		"/a%20b/c?x=1&y=%2F":      "/a b/c",
		"/a%3Fb":                  "/a?b",
		"/caf%C3%A9":              "/café",
		"/caf%c3%a9":              "/café",
		"/%E2%82%AC/%F0%9F%90%B3": "/€/🐳",
		"/a.b/.c/..d/...x":        "/a.b/.c/..d/...x",
		"/v1/items:batch;v=2":     "/v1/items:batch;v=2",
		"/a%3Bb/%2C%40%3A":        "/a;b/,@:",
		"/q?next=/a/../b?c":       "/q",
		"/q?x=%2e%2e%2F%C0%AF":    "/q",
	} {
		got, err := cleanTarget(uri)
		if !assert.Nil(t, err, uri) {
			continue
		}
		assert.Equal(t, want, got.path, uri)
	}
	for uri, why := range map[string]string{
		"": "not a path", "*": "not a path", "a/b": "not a path", "http://h/a": "not a path", "//h/a": "empty segment",
		"/a//b": "empty segment", "/..": "dot segment", "/a/.": "dot segment", "/a/./b": "dot segment",
		"/a/...": "dot segment", "/..;/a": "dot segment", "/a/.;x": "dot segment",
		"/a%2fb": "hides '/'", "/a%2Fb": "hides '/'", "/a%5cb": "hides", "/a%00b": "hides", "/a%0ab": "hides",
		"/a%7fb": "hides", "/a%25": "hides", "/a%252e%252e": "hides", "/a%C2%85b": "hides", "/a%C2%9Bb": "hides",
		"/a\\b": "character", "/a b": "character", "/a\tb": "character", "/a#b": "character",
		"/caf\xc3\xa9": "character", "/a?b c": "character", "/a?%zz": "character", "/a\"b": "character",
		"/a<b>": "character", "/a%2": "character", "/a%zz": "character",
		// non-canonical: an escaped unreserved character
		"/a/%2e": "unreserved", "/a/%2E%2e/b": "unreserved", "/a%2Eb": "unreserved", "/%7Euser": "unreserved",
		"/%41dmin": "unreserved", "/a%2db": "unreserved", "/a%5Fb": "unreserved",
		// not UTF-8 once decoded: overlong '/', '.', NUL; a surrogate; past U+10FFFF; cut short
		"/a%C0%AFb": "not UTF-8", "/%C0%AE%C0%AE/x": "not UTF-8", "/a%E0%80%AFb": "not UTF-8",
		"/%F0%80%80%AF": "not UTF-8", "/a%C0%80": "not UTF-8", "/a%C1%9C": "not UTF-8", "/%ED%A0%80": "not UTF-8",
		"/%F4%90%80%80": "not UTF-8", "/caf%C3": "not UTF-8", "/%FF%FE": "not UTF-8",
		// look-alikes an NFKC-normalising upstream reads as separators or dots
		"/a%EF%BC%8Fb": "look-alike", "/a%E2%88%95b": "look-alike", "/a%EF%BC%BCb": "look-alike",
		"/a%EF%BC%85": "look-alike", "/%EF%BC%8E%EF%BC%8E/x": "dot segment", "/%E2%80%A5": "dot segment",
		"/%E2%80%A6;x": "dot segment", "/.%EF%B9%92": "dot segment",
	} {
		_, err := cleanTarget(uri)
		if assert.NotNil(t, err, "%q must be refused", uri) {
			assert.Contains(t, err.msg, why, uri)
		}
	}
}

func TestUpstreamURL(t *testing.T) {
	t.Parallel()
	base, err := url.Parse("https://api.example/v1")
	require.NoError(t, err)
	for uri, want := range map[string]string{
		"/items?page=2": "https://api.example/v1/items?page=2",
		"/a%3Fb":        "https://api.example/v1/a%3Fb",
		"/a%20b/":       "https://api.example/v1/a%20b/",
		"/":             "https://api.example/v1/",
	} {
		tg, terr := cleanTarget(uri)
		require.Nil(t, terr, uri)
		assert.Equal(t, want, tg.upstreamURL(base).String(), uri)
	}
}

func TestAllowsPath(t *testing.T) {
	t.Parallel()
	g := &grant{}
	for _, p := range []string{"/repos/paddock", "/users/*/keys"} {
		segs, msg := parsePattern(p)
		require.Empty(t, msg)
		g.paths = append(g.paths, segs)
	}
	for path, want := range map[string]bool{
		"/repos/paddock": true, "/repos/paddock/": true, "/repos/paddock/x/y": true,
		"/repos/paddock-evil": false, "/repos": false, "/": false,
		"/users/ann/keys": true, "/users/ann/keys/1": true, "/users/keys": false, "/users/ann/other": false,
	} {
		tg, terr := cleanTarget(path)
		require.Nil(t, terr, path)
		assert.Equal(t, want, g.allowsPath(tg.segs), path)
	}
}

// FuzzCleanTarget: whatever the box sends, a target the broker accepts has
// no traversal, no escape an upstream could decode into one, and stays
// under the grant's base URL when joined to it.
func FuzzCleanTarget(f *testing.F) {
	for _, s := range []string{
		"/", "/a/b?c=d", "/a/../b", "/a/%2e%2e/b", "/a%2fb", "/%252e%252e/", "/..;/x", "//evil/x",
		"http://evil/x", "/a%C3%A9", "/a?b=%2F..%2F", "/a/b/", "/a\\b", "/a%00", "/x/.%2e/y",
		"/a%C0%AF", "/%C0%AE%C0%AE/", "/%EF%BC%8E%EF%BC%8E/", "/%7E", "/%E2%82%AC",
	} {
		f.Add(s)
	}
	base, _ := url.Parse("https://api.example/base")
	f.Fuzz(func(t *testing.T, uri string) {
		tg, err := cleanTarget(uri)
		if err != nil {
			return
		}
		if !strings.HasPrefix(tg.path, "/") || strings.ContainsAny(tg.path, "\\%\x00") {
			t.Fatalf("%q: unsafe path %q", uri, tg.path)
		}
		for _, seg := range strings.Split(tg.path[1:], "/") {
			b, _, _ := strings.Cut(seg, ";")
			if b != "" && strings.Trim(b, ".") == "" {
				t.Fatalf("%q: dot segment %q kept", uri, seg)
			}
		}
		if strings.Contains(tg.path[:len(tg.path)-1], "//") {
			t.Fatalf("%q: empty segment kept", uri)
		}
		if !utf8.ValidString(tg.path) || strings.ContainsFunc(tg.path, unicode.IsControl) || strings.ContainsAny(tg.path, lookalikeSeparators) {
			t.Fatalf("%q: path %q is not UTF-8, or holds a control or a look-alike separator", uri, tg.path)
		}
		for i := 0; i+2 < len(tg.escaped); i++ {
			if tg.escaped[i] == '%' && isUnreserved(unhex(tg.escaped[i+1])<<4|unhex(tg.escaped[i+2])) {
				t.Fatalf("%q: an escaped unreserved character kept in %q", uri, tg.escaped)
			}
		}
		// The escaping the box chose decodes to the same path, once.
		dec, derr := url.PathUnescape(tg.escaped)
		if derr != nil || dec != tg.path {
			t.Fatalf("%q: escaped %q decodes to %q (%v), not %q", uri, tg.escaped, dec, derr, tg.path)
		}
		u := tg.upstreamURL(base)
		back, perr := url.Parse(u.String())
		if perr != nil || back.Scheme != "https" || back.Host != "api.example" || !strings.HasPrefix(back.Path, "/base/") {
			t.Fatalf("%q: upstream URL %q leaves the base (%v)", uri, u.String(), perr)
		}
		if back.Path != "/base"+tg.path {
			t.Fatalf("%q: upstream path %q, want %q", uri, back.Path, "/base"+tg.path)
		}
		// Accepting is stable: the upstream's own reading of the request.
		if _, err := cleanTarget(u.RequestURI()); err != nil {
			t.Fatalf("%q: the upstream's request-target %q would be refused: %s", uri, u.RequestURI(), err.msg)
		}
	})
}

// FuzzParsePolicy: the parser never panics, and a policy it accepts only
// holds grants with usable names and https (or allowed http) URLs.
func FuzzParsePolicy(f *testing.F) {
	f.Add(`{"grants": [{"name": "a", "url": "https://a.example", "headers": {"A": "x ${secret:s} $$ ${token}"}, "token": {}}], "tenants": {"t": ["a"]}}`)
	f.Add(`{"grants": [{"name": "a", "url": "http://127.0.0.1:1/x/", "allow_http": true, "paths": ["/*/b"]}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		p, err := ParsePolicy([]byte(data))
		if err != nil {
			return
		}
		for name, g := range p.grants {
			if checkGrantName(name) != "" || g.base == nil || g.base.Host == "" || len(g.methods) == 0 {
				t.Fatalf("accepted an unusable grant %q: %+v", name, g)
			}
		}
	})
}

// streamSecrets are the secrets of the stream tests: the canary of the
// package's other tests, one that overlaps itself, and a scoped-token-like
// one, with a rendered header holding the first.
var streamSecrets = []string{"cAnArY-7f3a9c2e/1b+Qw<k>&v9-zz", "abcabcabcab", "eyJhbGciOi.x_Y-z"}

func streamRedactor() *redactor {
	return newRedactor(streamSecrets, []string{"Bearer " + streamSecrets[0]})
}

// redactSplit writes data to a stream cut at cuts (offsets, any order,
// out-of-range ones ignored), as an upstream's reads could cut it.
func redactSplit(r *redactor, data []byte, cuts []int) ([]byte, int) {
	var out bytes.Buffer
	st := r.stream(&out)
	prev := 0
	slices.Sort(cuts)
	for _, c := range cuts {
		if c > prev && c < len(data) {
			_, _ = st.Write(data[prev:c])
			prev = c
		}
	}
	_, _ = st.Write(data[prev:])
	_ = st.Close()
	return out.Bytes(), st.n
}

// checkRedacted fails if out holds a form of a secret, in any case.
func checkRedacted(t *testing.T, r *redactor, in, out []byte) {
	t.Helper()
	low := lowerASCII(nil, out)
	for _, f := range r.forms {
		if bytes.Contains(low, f) {
			t.Fatalf("%q: the output %q holds the form %q", in, out, f)
		}
	}
}

// streamSeeds are bodies with secrets in every form the redactor knows,
// whole and cut, at the edges and inside.
func streamSeeds() []string {
	c := streamSecrets[0]
	var forms []string
	for _, f := range streamRedactor().forms {
		forms = append(forms, "<"+string(f)+">", string(f)+" tail", "head "+string(f), string(f[1:]), string(f[:len(f)-1]))
	}
	return append(forms,
		"", c, "x"+c+"y", c+c, "Bearer "+c, "key: "+c[:12], c[9:]+" rest", c[5:15],
		`{"auth":"`+jsonEscape(c, true)+`"}`, strings.ToUpper(c), hex.EncodeToString([]byte(c)),
		base64.StdEncoding.EncodeToString([]byte("x"+c)), base64.URLEncoding.EncodeToString([]byte("xy"+c+"z")),
		"abcabcabcabcabcab", "zabcabcabca", "bcabcabcab!", "eyJhbGciOi.x_Y-z"+c, strings.Repeat("a", 100),
		"[REDACTED]"+c[:8],
	)
}

// TestStreamEverySplit: every input of the seeds, cut once or twice at
// every offset, redacts as it does whole, and holds no secret.
func TestStreamEverySplit(t *testing.T) {
	t.Parallel()
	r := streamRedactor()
	for _, in := range streamSeeds() {
		whole, n := r.bytes([]byte(in))
		checkRedacted(t, r, []byte(in), whole)
		for i := 0; i <= len(in); i++ {
			for j := i; j <= len(in); j += 7 {
				got, m := redactSplit(r, []byte(in), []int{i, j})
				if !bytes.Equal(got, whole) || m != n {
					t.Fatalf("%q cut at %d, %d: %q (%d), whole: %q (%d)", in, i, j, got, m, whole, n)
				}
			}
		}
	}
	whole, n := r.bytes([]byte("x " + streamSecrets[0] + " y"))
	assert.Equal(t, "x [REDACTED] y", string(whole))
	assert.Equal(t, 1, n)
}

// TestRedactWhole: what one answer becomes, and how many redactions it
// counts.
func TestRedactWhole(t *testing.T) {
	t.Parallel()
	r := streamRedactor()
	c := streamSecrets[0]
	for _, tc := range []struct {
		in, want string
		n        int
	}{
		{"nothing here", "nothing here", 0},
		{c, "[REDACTED]", 1},
		{"a " + c + " b " + c, "a [REDACTED] b [REDACTED]", 2},
		{"Authorization: Bearer " + c + ".", "Authorization: [REDACTED].", 1},
		{c + c, "[REDACTED]", 1},                       // touching spans are one
		{"abcabcabcabcabcab!", "[REDACTED]!", 1},       // overlapping occurrences of a self-overlapping secret
		{"x " + strings.ToUpper(c), "x [REDACTED]", 1}, // any ASCII case
		// never a piece: it would make an echo of the job's input an oracle
		{c[9:] + " and more", c[9:] + " and more", 0},
		{"up to " + c[:len(c)-1], "up to " + c[:len(c)-1], 0},
		{c[5:9], c[5:9], 0},
		{hex.EncodeToString([]byte(c)), "[REDACTED]", 1}, // hex
		// base64 inside a longer encoding: the groups that mix a secret's
		// first or last 1-2 bytes with its neighbours' stay ("u:c", "zz").
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+c)), "Basic dTpj[REDACTED]eno=", 1},
	} {
		got, n := r.bytes([]byte(tc.in))
		assert.Equal(t, tc.want, string(got), tc.in)
		assert.Equal(t, tc.n, n, tc.in)
	}
	// A policy without secrets (no grant injects one) has nothing to find.
	none := newRedactor(nil, []string{""})
	for _, in := range []string{"", "x", "an answer"} {
		got, n := redactSplit(none, []byte(in), []int{1})
		assert.Equal(t, in, string(got))
		assert.Zero(t, n)
	}
}

// FuzzStream: for any body and any cutting of it into writes, the stream's
// output holds no form of a secret and equals the whole body's redaction.
func FuzzStream(f *testing.F) {
	for i, s := range streamSeeds() {
		f.Add([]byte(s), []byte{byte(i), byte(3 * i), byte(len(s) / 2)})
	}
	r := streamRedactor()
	f.Fuzz(func(t *testing.T, data, cutBytes []byte) {
		cuts := make([]int, len(cutBytes))
		for i, c := range cutBytes {
			cuts[i] = int(c) * (1 + len(data)/256)
		}
		whole, n := r.bytes(data)
		checkRedacted(t, r, data, whole)
		got, m := redactSplit(r, data, cuts)
		if !bytes.Equal(got, whole) || m != n {
			t.Fatalf("%q cut at %v: %q (%d), whole: %q (%d)", data, cuts, got, m, whole, n)
		}
	})
}

// BenchmarkRedactStream redacts a 1 MiB body with secrets spread through
// it, written in 32 KiB reads as the broker reads an upstream.
func BenchmarkRedactStream(b *testing.B) {
	r := streamRedactor()
	var body bytes.Buffer
	for body.Len() < 1<<20 {
		body.WriteString(strings.Repeat("ordinary text of an answer, ", 100))
		body.WriteString(streamSecrets[0])
	}
	data := body.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		st := r.stream(io.Discard)
		for off := 0; off < len(data); off += 32 << 10 {
			_, _ = st.Write(data[off:min(off+32<<10, len(data))])
		}
		_ = st.Close()
	}
}
