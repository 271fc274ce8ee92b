package broker

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCleanTarget(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]string{
		"/":                   "/",
		"/a/b":                "/a/b",
		"/a/b/":               "/a/b/",
		"/a%20b/c?x=1&y=%2F":  "/a b/c",
		"/a%3Fb":              "/a?b",
		"/caf%C3%A9":          "/café",
		"/a.b/.c/..d/...x":    "/a.b/.c/..d/...x",
		"/v1/items:batch;v=2": "/v1/items:batch;v=2",
		"/q?next=/a/../b?c":   "/q",
	} {
		got, err := cleanTarget(uri)
		if !assert.Nil(t, err, uri) {
			continue
		}
		assert.Equal(t, want, got.path, uri)
	}
	for _, uri := range []string{
		"", "*", "a/b", "http://h/a", "//h/a", "/a//b", "/..", "/a/.", "/a/./b", "/a/%2e", "/a/%2E%2e/b",
		"/a/...", "/..;/a", "/a/.;x", "/a%2fb", "/a%5cb", "/a\\b", "/a%00b", "/a%0ab", "/a%25", "/a%2",
		"/a%zz", "/a b", "/a\tb", "/a#b", "/caf\xc3\xa9", "/a?b c", "/a?%zz", "/a\"b", "/a<b>",
	} {
		_, err := cleanTarget(uri)
		assert.NotNil(t, err, "%q must be refused", uri)
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
