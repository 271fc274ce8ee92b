package broker_test

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

// The attacks of issue 25 on redaction: a job whose grant reaches an
// upstream that echoes the injected credential, or serves a resource that
// holds it, tries to get the secret back whole or in pieces. Every test
// goes through the real broker socket to a real TLS upstream on loopback,
// and looks for the secret in everything the box received.

// leakRoutes are the upstream's echoing paths (under /api), served by route.
var leakRoutes = map[string]func(w http.ResponseWriter, r *http.Request, auth string){
	// The resource holding the credential, served by net/http with Range,
	// multi-range and If-Range support.
	"/resource": func(w http.ResponseWriter, r *http.Request, auth string) {
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "resource.txt", time.Unix(1e9, 0), strings.NewReader(resource(auth)))
	},
	// An upstream that cuts the resource where the query says, answering
	// 206 (it takes the range from the query, so stripping Range misses it).
	"/slice": func(w http.ResponseWriter, r *http.Request, auth string) {
		body, from, to := slice(r, resource(auth))
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to-1, len(resource(auth))))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, body)
	},
	// The same, answering 200: pagination of the application's own.
	"/page": func(w http.ResponseWriter, r *http.Request, auth string) {
		body, _, _ := slice(r, resource(auth))
		_, _ = io.WriteString(w, body)
	},
	"/gzip": func(w http.ResponseWriter, r *http.Request, auth string) {
		for _, ce := range r.URL.Query()["ce"] {
			if ce == "echo" { // an upstream that names its coding after the credential
				ce = strings.TrimPrefix(auth, "Bearer ")
			}
			w.Header().Add("Content-Encoding", ce)
		}
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, resource(auth))
		_ = zw.Close()
	},
	// The resource written in two chunks, cut inside the secret.
	"/split": func(w http.ResponseWriter, r *http.Request, auth string) {
		at, _ := strconv.Atoi(r.URL.Query().Get("at"))
		res := resource(auth)
		cut := strings.Index(res, canary) + at
		_, _ = io.WriteString(w, res[:cut])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, res[cut:])
	},
	// The secret alone, or at the very start or end of the body.
	"/edge": func(w http.ResponseWriter, r *http.Request, auth string) {
		tok := strings.TrimPrefix(auth, "Bearer ")
		_, _ = io.WriteString(w, map[string]string{"start": tok + "\ntail", "end": "head\n" + tok, "only": tok}[r.URL.Query().Get("where")])
	},
	// The job's own query parameter, echoed (an error message quoting it).
	"/echoq": func(w http.ResponseWriter, r *http.Request, _ string) {
		_, _ = io.WriteString(w, "you asked for: "+r.URL.Query().Get("q"))
	},
	"/headers": echoHeaders,
	"/forms":   echoForms,
}

// resource is a document that holds the credential in its middle.
func resource(auth string) string {
	return "# a document of the upstream\nkey: " + auth + "\n# end of the document\n"
}

// slice is res[off:off+len] of the request's query, clamped.
func slice(r *http.Request, res string) (string, int, int) {
	off, _ := strconv.Atoi(r.URL.Query().Get("off"))
	n, _ := strconv.Atoi(r.URL.Query().Get("len"))
	from := min(max(off, 0), len(res))
	to := min(from+max(n, 0), len(res))
	return res[from:to], from, to
}

// echoHeaders gives the credential back in every header it can: plain,
// as a cookie, a redirect, a challenge, a link, a header name (hex, since a
// header name cannot hold the canary's '/'), upper-cased, and in a
// trailer.
func echoHeaders(w http.ResponseWriter, _ *http.Request, auth string) {
	tok := strings.TrimPrefix(auth, "Bearer ")
	h := w.Header()
	h.Set("Trailer", "X-Trailer-Echo")
	h.Set("X-Echo", auth)
	h.Set("Set-Cookie", "session="+url.QueryEscape(tok))
	h.Set("Location", "/api/next?token="+url.QueryEscape(tok))
	h.Set("Www-Authenticate", `Bearer error="invalid_token", token="`+tok+`"`)
	h.Set("Link", "<https://x.example/?k="+url.QueryEscape(tok)+`>; rel="next"`)
	h.Set("X-"+hex.EncodeToString([]byte(tok)), "1")
	h.Set("X-Upper", strings.ToUpper(tok))
	h.Set("X-Safe", "kept")
	w.WriteHeader(http.StatusFound)
	_, _ = io.WriteString(w, "moved\n")
	h.Set("X-Trailer-Echo", tok)
}

// echoForms gives the credential back transformed: base64 (both alphabets,
// each alignment, alone and inside a longer encoded text), hex in both
// cases, upper and lower case, JSON-, URL- and HTML-escaped.
func echoForms(w http.ResponseWriter, _ *http.Request, auth string) {
	tok := strings.TrimPrefix(auth, "Bearer ")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
		for _, pre := range []string{"", "x", "xy"} {
			for _, post := range []string{"", "z", "zw"} {
				fmt.Fprintf(w, "b64[%q,%q]=%s\n", pre, post, enc.EncodeToString([]byte(pre+tok+post)))
			}
		}
		fmt.Fprintf(w, "basic=%s\n", enc.EncodeToString([]byte("user:"+auth)))
	}
	fmt.Fprintf(w, "hex=%s HEX=%s\n", hex.EncodeToString([]byte(tok)), strings.ToUpper(hex.EncodeToString([]byte(tok))))
	fmt.Fprintf(w, "upper=%s lower=%s\n", strings.ToUpper(tok), strings.ToLower(tok))
	fmt.Fprintf(w, "json=%s url=%s path=%s\n", jsonHTMLEscaped(tok), url.QueryEscape(tok), url.PathEscape(tok))
	fmt.Fprintf(w, "<p>invalid token: %s</p>\n", html.EscapeString(tok))
}

// minPiece is the shortest piece of the canary the leak checks look for.
const minPiece = 4

// leakForms are the ways the canary could be recognised in what the box
// got: whole, in any case, every piece of at least minPiece bytes,
// hex, JSON- and URL-escaped, and the part of its base64 encoding (either
// alphabet) that depends on it alone at each alignment.
func leakForms() []string {
	forms := []string{canary, strings.ToLower(canary), strings.ToUpper(canary), jsonHTMLEscaped(canary),
		html.EscapeString(canary), urlQueryEscaped(canary), url.PathEscape(canary), hex.EncodeToString([]byte(canary))}
	for n := minPiece; n < len(canary); n++ {
		for i := 0; i+n <= len(canary); i++ {
			forms = append(forms, canary[i:i+n])
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for _, pre := range []string{"", "x", "xy"} {
			e := enc.EncodeToString([]byte(pre + canary))
			start := 0
			if pre != "" {
				start = 4 // the group mixing pre with the canary's first bytes
			}
			forms = append(forms, e[start:4*((len(pre)+len(canary))/3)])
		}
	}
	return forms
}

// leaks collects what the box got over a sequence of calls and checks it.
type leaks struct {
	t       *testing.T
	answers []string
}

func (l *leaks) add(a answer) answer {
	l.answers = append(l.answers, fmt.Sprintf("%d %v\n%s", a.Status, a.Header, a.Body))
	return a
}

// check fails for a form of the canary in any answer, or in all of them
// put end to end (a secret split across answers).
func (l *leaks) check() {
	l.t.Helper()
	require.NotEmpty(l.t, l.answers)
	all := strings.Join(l.answers, "")
	upper := strings.ToUpper(all)
	for _, f := range leakForms() {
		if i := strings.Index(all, f); i >= 0 {
			l.t.Errorf("the box got %q of the canary: …%s…", f, all[max(0, i-40):min(len(all), i+len(f)+40)])
		}
		if len(f) >= 8 && strings.Contains(upper, strings.ToUpper(f)) {
			l.t.Errorf("the box got %q of the canary in another case", f)
		}
	}
}

// TestRangeNotForwarded: Range, multi-range and If-Range never reach the
// upstream, which answers with the whole resource, redacted; asking for
// bytes 0-9, then 10-19, … gets the same whole answer every time.
func TestRangeNotForwarded(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	ranges := []string{"bytes=0-3,10-13,20-23", "bytes=-20", "bytes=40-"}
	for i := 0; i < len(resource("Bearer "+canary)); i += 5 {
		ranges = append(ranges, fmt.Sprintf("bytes=%d-%d", i, i+4))
	}
	for _, rg := range ranges {
		a := l.add(bx.do("GET", "http://svc/resource", "", "Range", rg, "If-Range", `"v1"`))
		require.Equal(t, http.StatusOK, a.Status, "%s: %s", rg, a.Body)
		assert.Equal(t, strings.ReplaceAll(resource("Bearer "+canary), "Bearer "+canary, broker.Redacted), a.Body, rg)
		assert.Empty(t, a.Header.Get("Accept-Ranges"), "no range is offered to the box")
	}
	l.add(bx.do("HEAD", "http://svc/resource", "", "Range", "bytes=0-4"))
	for _, r := range s.up.seen() {
		assert.Empty(t, r.Header.Values("Range"), r.URI)
		assert.Empty(t, r.Header.Values("If-Range"), r.URI)
	}
	l.check()
}

// TestPartialContentRefused: an upstream that cuts the resource itself and
// answers 206 is refused, at every offset, whatever the piece.
func TestPartialContentRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	for off := 0; off < 70; off += 3 {
		a := l.add(bx.do("GET", fmt.Sprintf("http://svc/slice?off=%d&len=5", off), ""))
		require.Equal(t, http.StatusBadGateway, a.Status, a.Body)
		assert.Equal(t, string(broker.RulePartial), a.Header.Get(broker.HeaderRule))
		assert.Contains(t, a.Body, "grant svc: the upstream answered with part of a resource (206)")
	}
	l.check()
}

// TestAppPaginationHandsOutPieces records the limit of redaction: an
// upstream whose own parameters cut a resource holding the secret at the
// caller's offsets, answering 200, gives the secret away in pieces. The
// broker cannot know those parameters, and redacting pieces would make an
// oracle of every upstream that echoes the job's input
// (TestNoPieceOracle); docs/broker.md tells the operator not to grant such
// an upstream. If this test fails, the wall moved: update the docs.
func TestAppPaginationHandsOutPieces(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	start := strings.Index(resource("Bearer "+canary), canary)
	var got strings.Builder
	for off := start; off < start+len(canary); off += 8 {
		got.WriteString(bx.do("GET", fmt.Sprintf("http://svc/page?off=%d&len=%d", off, min(8, start+len(canary)-off)), "").Body)
	}
	assert.Equal(t, canary, got.String())
}

// TestNoPieceOracle: an upstream that echoes what the job sends answers a
// piece of the secret exactly as it answers any other text: the job cannot
// learn a secret a byte at a time by guessing the next byte of a known
// prefix and watching for a redaction. Only the whole secret, which the
// job cannot know, is redacted.
func TestNoPieceOracle(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	var guesses []string
	for n := 4; n < len(canary); n++ {
		guesses = append(guesses, canary[:n], canary[len(canary)-n:], strings.Repeat("x", n))
	}
	for _, g := range guesses {
		a := bx.do("GET", "http://svc/echoq?q="+url.QueryEscape(g), "")
		require.Equal(t, http.StatusOK, a.Status, a.Body)
		assert.Equal(t, "you asked for: "+g, a.Body, "a piece answers like any text")
		assert.Empty(t, a.Header.Get(broker.HeaderRedacted), g)
	}
	a := bx.do("GET", "http://svc/echoq?q="+url.QueryEscape(canary), "")
	assert.Equal(t, "you asked for: "+broker.Redacted, a.Body)
}

// TestCompressedRefused: a compressed answer (which the broker never asks
// for) is refused, however it is labelled, and the box's Accept-Encoding
// never reaches the upstream.
func TestCompressedRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	for _, q := range []string{"ce=gzip", "ce=GZIP", "ce=identity&ce=gzip", "ce=identity,+gzip", "ce=x-gzip", "ce=echo"} {
		a := l.add(bx.do("GET", "http://svc/gzip?"+q, "", "Accept-Encoding", "gzip"))
		assert.Equal(t, http.StatusBadGateway, a.Status, "%s: %s", q, a.Body)
		assert.Equal(t, string(broker.RuleEncoding), a.Header.Get(broker.HeaderRule), q)
	}
	for _, r := range s.up.seen() {
		assert.Equal(t, []string{"identity"}, r.Header.Values("Accept-Encoding"))
	}
	l.check()
}

// TestSecretSplitAcrossChunks: the upstream sends the resource in two
// chunks cut at every byte of the secret, and the secret alone or at the
// very start or end of a body. (How the broker's reads fall on the chunks
// is up to the network: FuzzStream and TestStreamEverySplit cut every way.)
func TestSecretSplitAcrossChunks(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	want := strings.ReplaceAll(resource("Bearer "+canary), "Bearer "+canary, broker.Redacted)
	for at := 1; at < len(canary); at++ {
		a := l.add(bx.do("GET", fmt.Sprintf("http://svc/split?at=%d", at), ""))
		require.Equal(t, http.StatusOK, a.Status, a.Body)
		assert.Equal(t, want, a.Body, "cut at %d", at)
	}
	for where, body := range map[string]string{"start": broker.Redacted + "\ntail", "end": "head\n" + broker.Redacted, "only": broker.Redacted} {
		a := l.add(bx.do("GET", "http://svc/edge?where="+where, ""))
		assert.Equal(t, body, a.Body, where)
		assert.Equal(t, "1", a.Header.Get(broker.HeaderRedacted), where)
	}
	l.check()
}

// TestSecretInResponseHeaders: no header the box gets holds the secret, a
// piece or a form of it, for GET and HEAD; trailers never reach the box.
func TestSecretInResponseHeaders(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	for _, m := range []string{"GET", "HEAD"} {
		a := l.add(bx.do(m, "http://svc/headers", ""))
		assert.Equal(t, http.StatusFound, a.Status, m)
		assert.Equal(t, "kept", a.Header.Get("X-Safe"), m)
		for _, h := range []string{"X-Echo", "Set-Cookie", "Location", "Www-Authenticate", "Link", "X-Upper", "X-Trailer-Echo", "Trailer"} {
			assert.Empty(t, a.Header.Values(h), "%s %s", m, h)
		}
	}
	l.check()
}

// TestTransformedSecretRedacted: base64 at every alignment (also inside a
// Basic credential), hex, case changes, JSON and URL escapes.
func TestTransformedSecretRedacted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	l := &leaks{t: t}
	a := l.add(bx.do("GET", "http://svc/forms", ""))
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	assert.Equal(t, 38, strings.Count(a.Body, broker.Redacted), a.Body)
	l.check()
}

// TestPolicyWithoutSecrets: a fleet whose grants inject no secret (an
// open upstream) has nothing to redact: answers and refusals pass as they
// are.
func TestPolicyWithoutSecrets(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	pol, err := broker.ParsePolicy([]byte(`{"grants": [{"name": "open", "url": "` + s.up.srv.URL + `/api"}], "tenants": {"acme": ["open"]}}`))
	require.NoError(t, err)
	require.NoError(t, s.b.SetPolicy(pol))
	bx := s.serve(broker.JobInfo{Tenant: "acme", ID: "open-1", Grants: []string{"open"}})
	a := bx.do("GET", "http://open/edge?where=only", "")
	assert.Equal(t, http.StatusOK, a.Status, a.Body)
	a = bx.do("GET", "http://open/items", "")
	assert.Equal(t, `{"ok":true}`, a.Body)
	a = bx.do("GET", "http://nosuch/items", "")
	assert.Equal(t, http.StatusForbidden, a.Status)
	assert.Contains(t, a.Body, `grant "nosuch" does not exist`)
}
