package gateway

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// The dashboard (docs/dashboard.md): plain HTML, CSS and JavaScript
// modules under ui/, embedded in the binary and served at / and /ui/…. It
// is a client of the /v1 API like any other; the only thing it adds is a
// login: a browser's EventSource cannot send an Authorization header, so
// POST /ui/login checks a tenant token once and gives the browser an
// HttpOnly, SameSite=Strict cookie naming a login, which the /v1 middleware (authenticate) then
// takes in place of the header. Every request made with that cookie but a
// GET or HEAD must also carry the header X-Paddock-CSRF: 1, which a form
// or an image of another site cannot send. The cookie holds only the id
// of a login kept server-side (login.go), which logout deletes and which
// expires; the login's token is checked again on every request, so a
// revoked token logs its browsers out at once.

//go:embed ui
var uiFiles embed.FS

const (
	// sessionCookie holds a dashboard login's id (login.go).
	sessionCookie = "paddock_session"
	// csrfHeader must be on every non-GET request made with the cookie.
	csrfHeader = "X-Paddock-CSRF"
	// sessionMaxAge is how long a browser keeps a login.
	sessionMaxAge = 12 * time.Hour
	// maxLoginBody bounds a login request (a token is ~56 bytes).
	maxLoginBody = 4 << 10
)

// uiCSP is the Content-Security-Policy of every dashboard answer: only the
// gateway's own scripts, styles and connections; no inline script or
// style, no plugin, no framing.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// uiRoutes registers the dashboard on mux.
func (g *Gateway) uiRoutes(mux *http.ServeMux) {
	assets, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /{$}", uiHeaders(serveAsset(assets, "index.html")))
	mux.Handle("GET /ui/{file...}", uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serveAsset(assets, r.PathValue("file")).ServeHTTP(w, r)
	})))
	// /jobs/<id> is the job page's address too.
	mux.Handle("GET /jobs/{id}", uiHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/#/jobs/"+url.PathEscape(r.PathValue("id")), http.StatusFound)
	})))
	mux.Handle("POST /ui/login", uiHeaders(http.HandlerFunc(g.uiLogin)))
	mux.Handle("POST /ui/logout", uiHeaders(http.HandlerFunc(g.uiLogout)))
	mux.Handle("GET /ui/session", uiHeaders(http.HandlerFunc(g.uiSession)))
}

// uiHeaders sets the dashboard's security headers.
func uiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// serveAsset serves one embedded file (never a directory listing).
func serveAsset(assets fs.FS, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := assets.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		info, err := f.Stat()
		rs, seekable := f.(io.ReadSeeker)
		if err != nil || info.IsDir() || !seekable {
			http.NotFound(w, r)
			return
		}
		if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		// The assets change with the binary: revalidate (embed has no
		// modification times, so this costs a full answer, a few KB).
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, time.Time{}, rs)
	})
}

// loginRequest is POST /ui/login's body.
type loginRequest struct {
	Token string `json:"token"`
}

// sessionInfo is who a dashboard login is (never the token).
type sessionInfo struct {
	Tenant  string `json:"tenant"` // "": not logged in
	TokenID string `json:"token_id"`
	// Operator: logged in with the operator token (operator.go); the
	// dashboard then shows the operator's pages only.
	Operator bool `json:"operator,omitempty"`
	// Message says why a login ended.
	Message string `json:"message,omitempty"`
}

// uiLogin is POST /ui/login: check the token, create a login and set its
// cookie.
func (g *Gateway) uiLogin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(csrfHeader) != "1" {
		writeError(w, csrfRefusal(r))
		return
	}
	var req loginRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLoginBody)).Decode(&req); err != nil {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: codeMalformedJSON, Err: err,
			Message: `the login body must be JSON: {"token":"pdk_…"}`})
		return
	}
	token := strings.TrimSpace(req.Token)
	if token == "" {
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized,
			Message: "paste a tenant token to log in (the operator issues them: paddock tenant token NAME; they start with pdk_)"})
		return
	}
	// The guard (guard.go) limits failed logins per client address, like
	// any other credential.
	id, aerr := g.checkUI(r, credential{value: token})
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	lid, err := g.login(r.Context(), id, token)
	if err != nil {
		g.log.Warn("dashboard login: the login store failed", "err", err)
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "the gateway cannot store logins right now; retry shortly"})
		return
	}
	http.SetCookie(w, g.cookie(r, lid, int(sessionMaxAge/time.Second)))
	g.log.Info("dashboard login", "tenant", id.Tenant, "token", id.TokenID, "operator", id.Operator)
	_ = writeJSON(w, http.StatusOK, sessionInfo{Tenant: id.Tenant, TokenID: id.TokenID, Operator: id.Operator})
}

// uiLogout is POST /ui/logout: delete the login (its id no longer works,
// wherever a copy of the cookie is) and clear the cookie.
func (g *Gateway) uiLogout(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(csrfHeader) != "1" {
		writeError(w, csrfRefusal(r))
		return
	}
	if c, err := r.Cookie(sessionCookie); err == nil && wellFormedLoginID(c.Value) {
		ctx, cancel := context.WithTimeout(r.Context(), authTimeout)
		defer cancel()
		g.guard.forget(c.Value)
		if err := g.cfg.Logins.DeleteLogin(ctx, loginKey(c.Value)); err != nil {
			g.log.Warn("dashboard logout: the login store failed", "err", err)
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
				Message: "the gateway could not end the login right now; retry shortly"})
			return
		}
	}
	g.clearSession(w, r)
	w.WriteHeader(http.StatusNoContent)
}

// uiSession is GET /ui/session: who the cookie logs in as; an empty
// tenant when nobody is logged in or the login no longer works (then the
// cookie is cleared). The dashboard asks on load, so this is a 200 either
// way, not a 401 the browser would log as an error.
func (g *Gateway) uiSession(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		_ = writeJSON(w, http.StatusOK, sessionInfo{})
		return
	}
	id, aerr := g.checkUI(r, credential{value: c.Value, cookie: true})
	switch {
	case aerr == nil:
		_ = writeJSON(w, http.StatusOK, sessionInfo{Tenant: id.Tenant, TokenID: id.TokenID, Operator: id.Operator})
	case aerr.Status == http.StatusUnauthorized:
		g.clearSession(w, r)
		_ = writeJSON(w, http.StatusOK, sessionInfo{Message: "your login ended (" + aerr.Message + ")"})
	default:
		writeError(w, aerr)
	}
}

// checkUI authenticates cred for the dashboard: a 401 apiError when it is
// bad, 429 when its address is over its failures, 503 when a store failed.
func (g *Gateway) checkUI(r *http.Request, cred credential) (Identity, *apiError) {
	id, err := g.check(r, cred)
	var aerr *apiError
	switch {
	case errors.As(err, &aerr):
		return Identity{}, aerr
	case errors.Is(err, ErrUnauthorized) && cred.cookie:
		return Identity{}, &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Err: err,
			Message: "logged out, expired, or its token was revoked: log in again"}
	case errors.Is(err, ErrUnauthorized):
		return Identity{}, &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Err: err,
			Message: "that token is unknown, malformed or revoked: paste a token the operator issued " +
				"(paddock tenant token NAME; it starts with pdk_)"}
	case err != nil:
		g.log.Warn("dashboard: the token or login store failed", "err", err)
		return Identity{}, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "the gateway cannot check tokens right now (its token store failed); retry shortly"}
	}
	return id, nil
}

// cookie is the login cookie of value: HttpOnly, SameSite=Strict, and
// Secure unless the operator said the gateway is served over plain HTTP on
// loopback (Config.InsecureCookies) and the request did not come over TLS.
func (g *Gateway) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	secure := !g.cfg.InsecureCookies || forwardedHTTPS(r, g.cfg.TrustedProxies)
	return &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode}
}

func (g *Gateway) clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, g.cookie(r, "", -1))
}

// sessionToken is the login id of r's session cookie, for the /v1
// middleware: ok when there is one. A request other than GET or HEAD made
// with the cookie needs the CSRF header; without it sessionToken answers
// 403 itself (answered).
func sessionToken(w http.ResponseWriter, r *http.Request) (token string, ok, answered bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return "", false, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(csrfHeader) != "1" {
		writeError(w, csrfRefusal(r))
		return "", false, true
	}
	return c.Value, true, false
}

func csrfRefusal(r *http.Request) *apiError {
	return &apiError{Status: http.StatusForbidden, Code: codeForbidden, Message: fmt.Sprintf(
		"%s %s with the dashboard's session cookie needs the header %s: 1 (the dashboard sends it; "+
			"a page of another site cannot): send it, or use Authorization: Bearer <token>", r.Method, r.URL.Path, csrfHeader)}
}
