package gateway

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uiClient is a browser-like client of the dashboard: no redirects
// followed, cookies set by hand.
type uiClient struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newUIClient(t *testing.T, base string, hc *http.Client) *uiClient {
	if hc == nil {
		hc = &http.Client{}
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &uiClient{t: t, base: base, hc: hc}
}

// do sends method path with body (JSON text, or "" for none) and the
// headers given as pairs; it returns the answer and its body.
func (c *uiClient) do(method, path, body string, header ...string) (*http.Response, string) {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, r)
	require.NoError(c.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(data)
}

func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	return nil
}

const cookieHeader = "Cookie"

// A login checks the token with the Authenticator: a bad one is refused
// with a message saying what to paste; a good one sets an HttpOnly,
// SameSite=Strict, Path=/ cookie holding a login id, never the token,
// Secure unless the operator said the gateway is plain HTTP on loopback.
// A login without the CSRF header is refused (a page of another site
// cannot log a browser in as its own tenant).
func TestUILogin(t *testing.T) {
	t.Parallel()
	c := newUIClient(t, serveTest(t, bareGateway(t, nil).Handler()), nil)

	resp, body := c.do(http.MethodPost, "/ui/login", `{"token":"pdk_wrong"}`, csrfHeader, "1")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, body, "unknown, malformed or revoked")
	assert.Contains(t, body, "paddock tenant token")
	assert.Nil(t, sessionCookieOf(resp), "a refused login sets no cookie")

	resp, body = c.do(http.MethodPost, "/ui/login", `{"token":""}`, csrfHeader, "1")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, body, "paste a tenant token")
	resp, _ = c.do(http.MethodPost, "/ui/login", `not json`, csrfHeader, "1")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, body = c.do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF header")
	assert.Contains(t, body, csrfHeader)
	assert.Nil(t, sessionCookieOf(resp))

	resp, body = c.do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`, csrfHeader, "1")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.JSONEq(t, `{"tenant":"dev","token_id":"dev-id"}`, body)
	ck := sessionCookieOf(resp)
	require.NotNil(t, ck)
	assert.NotContains(t, ck.Value, devToken, "the cookie holds a login id, not the token")
	assert.True(t, wellFormedLoginID(ck.Value))
	assert.True(t, ck.HttpOnly, "scripts cannot read the cookie")
	assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	assert.Equal(t, "/", ck.Path)
	assert.True(t, ck.Secure, "Secure unless the operator said plain HTTP on loopback")
	assert.Positive(t, ck.MaxAge)

	plain := newUIClient(t, serveTest(t, bareGateway(t, func(c *Config) { c.InsecureCookies = true }).Handler()), nil)
	resp, body = plain.do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`, csrfHeader, "1")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.False(t, sessionCookieOf(resp).Secure, "InsecureCookies: plain HTTP on loopback")

	tls := httptest.NewTLSServer(bareGateway(t, func(c *Config) { c.InsecureCookies = true }).Handler())
	t.Cleanup(tls.Close)
	resp, body = newUIClient(t, tls.URL, tls.Client()).do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`, csrfHeader, "1")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NotNil(t, sessionCookieOf(resp))
	assert.True(t, sessionCookieOf(resp).Secure, "over TLS the cookie is Secure whatever the setting")

	proxied := newUIClient(t, serveTest(t, bareGateway(t, func(c *Config) {
		c.InsecureCookies = true
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}).Handler()), nil)
	resp, body = proxied.do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`, csrfHeader, "1", "X-Forwarded-Proto", "https")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.True(t, sessionCookieOf(resp).Secure, "a trusted proxy that ended TLS")
}

// login logs c in as token and returns the cookie header's value.
func (c *uiClient) login(token string) string {
	c.t.Helper()
	resp, body := c.do(http.MethodPost, "/ui/login", `{"token":"`+token+`"}`, csrfHeader, "1")
	require.Equal(c.t, http.StatusOK, resp.StatusCode, body)
	ck := sessionCookieOf(resp)
	require.NotNil(c.t, ck)
	return sessionCookie + "=" + ck.Value
}

// The /v1 middleware takes the session cookie in place of the bearer
// header; a request with it other than GET needs the CSRF header. Logout
// clears the cookie; /ui/session says who is logged in.
func TestUICookieAuthAndCSRF(t *testing.T) {
	t.Parallel()
	c := newUIClient(t, serveTest(t, bareGateway(t, nil).Handler()), nil)
	good := c.login(devToken)

	// The cookie authenticates: the request gets past auth to the (absent)
	// fleet of tenant dev, 503, not 401.
	resp, body := c.do(http.MethodGet, "/v1/jobs/j1", "", cookieHeader, good)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Contains(t, body, "tenant dev")

	resp, body = c.do(http.MethodDelete, "/v1/jobs/j1", "", cookieHeader, good)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-site DELETE with the cookie: %s", body)
	assert.Equal(t, codeForbidden, apiErrString(t, body).Code)
	assert.Contains(t, body, "X-Paddock-CSRF: 1")
	resp, _ = c.do(http.MethodPost, "/v1/jobs", `{"command":"echo hi"}`, cookieHeader, good, csrfHeader, "yes")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "the header's value must be 1")
	resp, body = c.do(http.MethodDelete, "/v1/jobs/j1", "", cookieHeader, good, csrfHeader, "1")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "with the header it passes: %s", body)

	// A bearer header needs no CSRF header (no browser sends it on its own).
	resp, _ = c.do(http.MethodDelete, "/v1/jobs/j1", "", "Authorization", "Bearer "+devToken)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	resp, _ = c.do(http.MethodGet, "/v1/jobs/j1", "", cookieHeader, sessionCookie+"="+devToken)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the token itself is no login id")
	resp, _ = c.do(http.MethodGet, "/v1/jobs/j1", "", cookieHeader, sessionCookie+"="+newLoginID())
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an unknown login id")

	_, body = c.do(http.MethodGet, "/ui/session", "")
	assert.JSONEq(t, `{"tenant":"","token_id":""}`, body)
	_, body = c.do(http.MethodGet, "/ui/session", "", cookieHeader, good)
	assert.JSONEq(t, `{"tenant":"dev","token_id":"dev-id"}`, body)
	resp, body = c.do(http.MethodGet, "/ui/session", "", cookieHeader, sessionCookie+"=pdk_revoked")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "your login ended")
	require.NotNil(t, sessionCookieOf(resp))
	assert.Negative(t, sessionCookieOf(resp).MaxAge, "a dead login's cookie is cleared")

	resp, _ = c.do(http.MethodPost, "/ui/logout", "", cookieHeader, good)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = c.do(http.MethodPost, "/ui/logout", "", cookieHeader, good, csrfHeader, "1")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.NotNil(t, sessionCookieOf(resp))
	assert.Negative(t, sessionCookieOf(resp).MaxAge)
	assert.Empty(t, sessionCookieOf(resp).Value)
}

func apiErrString(t *testing.T, body string) errorDetail {
	t.Helper()
	return apiErr(t, []byte(body))
}

// The dashboard's pages and assets are served with a strict CSP; no
// directory is listed; /jobs/<id> leads to the job page.
func TestUIAssets(t *testing.T) {
	t.Parallel()
	c := newUIClient(t, serveTest(t, bareGateway(t, nil).Handler()), nil)
	resp, body := c.do(http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("Content-Type"), "text/html")
	assert.Equal(t, uiCSP, resp.Header.Get("Content-Security-Policy"))
	assert.True(t, strings.HasPrefix(uiCSP, "default-src 'self'; script-src 'self'; style-src 'self';"))
	assert.NotContains(t, uiCSP, "unsafe")
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	assert.Contains(t, body, `<script type="module" src="/ui/app.js">`)

	for path, ct := range map[string]string{"/ui/app.js": "javascript", "/ui/style.css": "text/css", "/ui/favicon.svg": "image/svg+xml"} {
		resp, body := c.do(http.MethodGet, path, "")
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Type"), ct, path)
		assert.NotEmpty(t, body)
		assert.Equal(t, uiCSP, resp.Header.Get("Content-Security-Policy"), path)
	}
	for _, path := range []string{"/ui/", "/ui/nope.js", "/ui/..%2fui.go", "/ui/%2e%2e/gateway.go", "/index.html"} {
		resp, _ := c.do(http.MethodGet, path, "")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
	resp, _ = c.do(http.MethodGet, "/jobs/abc-1", "")
	assert.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Equal(t, "/#/jobs/abc-1", resp.Header.Get("Location"))
}

// Every embedded file is safe by construction: no inline script, style or
// event handler (the CSP would refuse them anyway, and a console error
// would follow), no HTML built from strings, nothing from another origin
// (the dashboard works offline).
func TestUIAssetsAreSafe(t *testing.T) {
	t.Parallel()
	forbidden := map[string]*regexp.Regexp{
		"inline event handler":  regexp.MustCompile(`(?i)<[^>]+\son[a-z]+\s*=`),
		"inline script":         regexp.MustCompile(`(?i)<script(\s[^>]*)?>\s*[^<\s]`),
		"style attribute":       regexp.MustCompile(`(?i)<[^>]+\sstyle\s*=`),
		"HTML from a string":    regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment|DOMParser`),
		"eval":                  regexp.MustCompile(`\beval\(|new Function\(|setTimeout\(\s*['"]`),
		"another origin":        regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/`),
		"javascript: URL":       regexp.MustCompile(`(?i)javascript:`),
		"on* attribute via API": regexp.MustCompile(`setAttribute\(\s*['"]on`),
	}
	n := 0
	require.NoError(t, fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := fs.ReadFile(uiFiles, path)
		require.NoError(t, err)
		text := strings.ReplaceAll(string(data), "http://www.w3.org/2000/svg", "") // the SVG namespace is a name, not a fetch
		for what, re := range forbidden {
			assert.Nil(t, re.FindStringIndex(text), "%s in %s: %q", what, path, re.FindString(text))
		}
		return nil
	}))
	assert.GreaterOrEqual(t, n, 8, "the dashboard's files are embedded")
}

// Failed logins from one address are limited like any failed credential
// (guard.go): past the burst even a good token (never used from there)
// waits.
func TestUILoginRateLimit(t *testing.T) {
	t.Parallel()
	c := newUIClient(t, serveTest(t, bareGateway(t, func(c *Config) { c.AuthFailRate, c.AuthFailBurst = 0.001, 2 }).Handler()), nil)
	for i := range 2 {
		resp, body := c.do(http.MethodPost, "/ui/login", `{"token":"pdk_guess"}`, csrfHeader, "1")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "login %d: %s", i, body)
	}
	resp, body := c.do(http.MethodPost, "/ui/login", `{"token":"`+devToken+`"}`, csrfHeader, "1")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	assert.Nil(t, sessionCookieOf(resp))
}
