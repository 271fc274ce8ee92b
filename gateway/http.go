package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// The HTTP API under /v1, documented by openapi.json (openapi.go). Every
// operation but GET /v1/openapi.json takes "Authorization: Bearer
// <token>"; the token names the tenant, and the gateway then acts through
// that tenant's own client (Config.Clients), so a request can reach only
// its tenant's jobs: another tenant's job id is simply unknown (404).
// Errors are one JSON shape, errorBody.

// Timeouts of one request (NewServer's are in server.go).
const (
	// requestTimeout bounds a request that only talks to NATS once or
	// twice, and the submission of a POST /v1/jobs.
	requestTimeout = 30 * time.Second
	// authTimeout bounds the Authenticator.
	authTimeout = 10 * time.Second
	// downloadTimeout bounds a whole download of kept output or an
	// artifact; writeStall bounds each write of it (a reader that stops
	// reading is dropped).
	downloadTimeout = 15 * time.Minute
	writeStall      = 30 * time.Second
)

// routeKind says how long an operation may run.
type routeKind int

const (
	kindQuick    routeKind = iota // requestTimeout
	kindWait                      // requestTimeout + Config.MaxWait (?wait=)
	kindDownload                  // downloadTimeout, writeStall per write
	kindStream                    // no timeout: an event stream (sse.go)
)

// apiRoute is one operation of the API; routes registers apiRoutes and
// openapi_test checks them against openapi.json.
type apiRoute struct {
	method  string
	pattern string // an http.ServeMux pattern without the method
	public  bool   // no bearer token
	// operator: the operator token only (Config.OperatorToken); every
	// other authenticated route refuses it.
	operator bool
	kind     routeKind
	serve    func(g *Gateway, w http.ResponseWriter, r *http.Request, id Identity) error
}

var apiRoutes = []apiRoute{
	{method: http.MethodGet, pattern: "/v1/openapi.json", public: true, serve: (*Gateway).getOpenAPI},
	{method: http.MethodPost, pattern: "/v1/jobs", kind: kindWait, serve: (*Gateway).submitJob},
	{method: http.MethodGet, pattern: "/v1/jobs", serve: (*Gateway).listJobs},
	{method: http.MethodGet, pattern: "/v1/events", kind: kindStream, serve: (*Gateway).jobEvents},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/trace", serve: (*Gateway).jobTrace},
	{method: http.MethodGet, pattern: "/v1/fleet", serve: (*Gateway).fleet},
	{method: http.MethodGet, pattern: "/v1/operator/fleet", operator: true, serve: (*Gateway).operatorFleet},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}", kind: kindWait, serve: (*Gateway).getJob},
	{method: http.MethodDelete, pattern: "/v1/jobs/{id}", serve: (*Gateway).cancelJob},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/events", kind: kindStream, serve: (*Gateway).followJob},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/output/{stream}", kind: kindDownload, serve: (*Gateway).getOutput},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/artifacts", serve: (*Gateway).listArtifacts},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/artifacts/{path...}", kind: kindDownload, serve: (*Gateway).getArtifact},
	{method: http.MethodDelete, pattern: "/v1/sessions/{name}", kind: kindWait, serve: (*Gateway).deleteSession},
}

// routes registers the API on mux: each operation, a JSON 405 (with
// Allow) for the other methods of its path, and a JSON 404 for any other
// path under /v1/.
func (g *Gateway) routes(mux *http.ServeMux) {
	allow := map[string][]string{}
	var paths []string
	for _, rt := range apiRoutes {
		mux.Handle(rt.method+" "+rt.pattern, g.handle(rt))
		if allow[rt.pattern] == nil {
			paths = append(paths, rt.pattern)
		}
		allow[rt.pattern] = append(allow[rt.pattern], rt.method)
	}
	for _, p := range paths {
		methods := strings.Join(allow[p], ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: codeMethodNotAllowed,
				Message: fmt.Sprintf("%s does not take %s; it takes %s", r.URL.Path, r.Method, methods)})
		})
	}
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Code: codeNotFound,
			Message: fmt.Sprintf("no API operation at %s; GET /v1/openapi.json lists them", r.URL.Path)})
	})
}

// handle wraps one operation: panics become 500s, the request gets its
// deadline, the bearer token is checked and rate limited, a body is
// refused where none is taken, and the outcome is logged.
func (g *Gateway) handle(rt apiRoute) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		var id Identity
		defer func() {
			// What is left to send after the handler has writeStall.
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeStall))
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				g.log.Error("panic in an API handler", "route", rt.pattern, "panic", p)
				if rec.status == 0 {
					writeError(rec, &apiError{Status: http.StatusInternalServerError, Code: codeInternal,
						Message: "the gateway failed on this request; it was logged"})
				}
			}
			g.logRequest(r, rec, id, time.Since(start))
		}()
		ctx, cancel := g.deadline(rec, r, rt.kind)
		defer cancel()
		r = r.WithContext(ctx)
		if rt.method != http.MethodPost && (r.ContentLength > 0 || len(r.TransferEncoding) > 0) {
			writeError(rec, &apiError{Status: http.StatusBadRequest, Code: codeInvalidRequest,
				Message: r.Method + " takes no request body; only POST does"})
			return
		}
		if !rt.public {
			var ok bool
			if id, ok = g.authenticate(rec, r); !ok {
				return
			}
			if aerr := roleRefusal(rt, id); aerr != nil {
				writeError(rec, aerr)
				return
			}
		}
		if err := rt.serve(g, rec, r, id); err != nil {
			g.fail(rec, r, err)
		}
	})
}

// deadline gives the request its context deadline and, except for an
// event stream (sse.go sets one per event) and a download (per write), a
// write deadline just after it.
func (g *Gateway) deadline(w http.ResponseWriter, r *http.Request, kind routeKind) (context.Context, context.CancelFunc) {
	var d time.Duration
	switch kind {
	case kindQuick:
		d = requestTimeout
	case kindWait:
		d = requestTimeout + g.cfg.MaxWait
	case kindDownload:
		d = downloadTimeout
	default:
		return context.WithCancel(r.Context())
	}
	if kind != kindDownload {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + 5*time.Second))
	}
	return context.WithTimeout(r.Context(), d)
}

// authenticate checks the bearer token (or the dashboard's login cookie)
// and the token's rate limit; false when it answered the request itself
// (401, 403, 429 or 503).
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (Identity, bool) {
	cred := credential{}
	var ok bool
	if cred.value, ok = bearerToken(r.Header.Get("Authorization")); !ok {
		// The dashboard's login cookie (ui.go), with its CSRF check.
		var answered bool
		if cred.value, ok, answered = sessionToken(w, r); answered {
			return Identity{}, false
		}
		cred.cookie = ok
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="paddock"`)
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized,
			Message: "this operation needs a bearer token: send the header Authorization: Bearer <token> " +
				"(the operator issues them: paddock tenant token NAME)"})
		return Identity{}, false
	}
	id, err := g.check(r, cred)
	var aerr *apiError
	switch {
	case errors.As(err, &aerr):
		writeError(w, aerr)
		return Identity{}, false
	case errors.Is(err, ErrUnauthorized):
		w.Header().Set("WWW-Authenticate", `Bearer realm="paddock", error="invalid_token"`)
		msg := "the bearer token is unknown, malformed or revoked: ask the operator for a valid one"
		if cred.cookie {
			msg = "your dashboard login ended (logged out, expired, or its token was revoked): log in again"
		}
		writeError(w, &apiError{Status: http.StatusUnauthorized, Code: codeUnauthorized, Message: msg})
		return Identity{}, false
	case err != nil:
		g.log.Warn("authentication failed", "err", err)
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second,
			Message: "the gateway cannot check tokens right now (its token store failed); retry shortly"})
		return Identity{}, false
	}
	if ok, wait := g.lim.allow(limitKey(id), time.Now()); !ok {
		writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: codeRateLimited, RetryAfter: wait,
			Message: fmt.Sprintf("token %s is over its rate limit of %g requests/s (burst %d): retry after the Retry-After seconds",
				id.TokenID, g.cfg.Rate, g.cfg.Burst)})
		return Identity{}, false
	}
	return id, true
}

// credential is what a request presents: a bearer token, or the id of a
// dashboard login (its cookie).
type credential struct {
	value  string
	cookie bool
}

// check authenticates cred for r. The guard comes first: from an address
// over its failures, a credential not known to be good is refused (a 429
// *apiError) before any lookup. A bad credential is an error wrapping
// ErrUnauthorized, and counts against the address; any other error is a
// failure of the stores.
func (g *Gateway) check(r *http.Request, cred credential) (Identity, error) {
	addr := clientAddr(r, g.cfg.TrustedProxies)
	if ok, wait := g.guard.admit(addr, cred.value, time.Now()); !ok {
		return Identity{}, &apiError{Status: http.StatusTooManyRequests, Code: codeRateLimited, RetryAfter: wait,
			Message: fmt.Sprintf("too many failed credentials from your address %s (the gateway allows %g a second, burst %d): "+
				"retry after the Retry-After seconds, with a valid token", addr, g.cfg.AuthFailRate, g.cfg.AuthFailBurst)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), authTimeout)
	defer cancel()
	token, err := cred.value, error(nil)
	if cred.cookie {
		token, err = g.loginToken(ctx, cred.value)
	}
	var id Identity
	switch {
	case err == nil && g.isOperatorToken(token):
		id = Identity{Operator: true, TokenID: "operator"}
	case err == nil:
		id, err = g.cfg.Auth.Authenticate(ctx, token)
	}
	if err == nil && !id.Operator && job.CheckTenant(id.Tenant) != nil {
		err = fmt.Errorf("gateway: the authenticator gave token %q the invalid tenant %q", id.TokenID, id.Tenant)
	}
	switch {
	case errors.Is(err, ErrUnauthorized):
		g.guard.failed(addr, time.Now())
	case err == nil:
		g.guard.succeeded(cred.value, time.Now())
	}
	return id, err
}

// bearerToken reads "Bearer <token>" (the scheme is case-insensitive).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// limitKey is what the rate limit and stream count of id are kept under.
func limitKey(id Identity) string {
	if id.TokenID != "" {
		return "token:" + id.TokenID
	}
	return "tenant:" + id.Tenant
}

func (g *Gateway) logRequest(r *http.Request, rec *statusRecorder, id Identity, took time.Duration) {
	level := slogLevel(rec.status)
	g.log.Log(r.Context(), level, "http request", "method", r.Method, "path", r.URL.Path,
		"status", rec.status, "bytes", rec.bytes, "tenant", id.Tenant, "token", id.TokenID, "took", took)
}

// tenantClient is id's tenant's client.
func (g *Gateway) tenantClient(ctx context.Context, id Identity) (*client.Client, error) {
	c, err := g.cfg.Clients.Client(ctx, id.Tenant)
	if err != nil {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second,
			Message: fmt.Sprintf("the gateway cannot reach the fleet as tenant %s right now (%v); retry shortly", id.Tenant, err), Err: err}
	}
	return c, nil
}

// statusRecorder notes the status and size of an answer.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = cmp.Or(s.status, code)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	s.status = cmp.Or(s.status, http.StatusOK)
	n, err := s.ResponseWriter.Write(p)
	s.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func slogLevel(status int) slog.Level {
	if status >= 500 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}
