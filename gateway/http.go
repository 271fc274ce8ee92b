package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"
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
	kind    routeKind
	serve   func(g *Gateway, w http.ResponseWriter, r *http.Request, id Identity) error
}

var apiRoutes = []apiRoute{
	{method: http.MethodGet, pattern: "/v1/openapi.json", public: true, serve: (*Gateway).getOpenAPI},
	{method: http.MethodPost, pattern: "/v1/jobs", kind: kindWait, serve: (*Gateway).submitJob},
	{method: http.MethodGet, pattern: "/v1/jobs", serve: (*Gateway).listJobs},
	{method: http.MethodGet, pattern: "/v1/events", kind: kindStream, serve: (*Gateway).jobEvents},
	{method: http.MethodGet, pattern: "/v1/jobs/{id}/trace", serve: (*Gateway).jobTrace},
	{method: http.MethodGet, pattern: "/v1/fleet", serve: (*Gateway).fleet},
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
	if err == nil {
		id, err = g.cfg.Auth.Authenticate(ctx, token)
	}
	if err == nil && job.CheckTenant(id.Tenant) != nil {
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

// jobID is the {id} of the request's path, checked.
func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, job.CheckID(id)
}

// accepted is the answer to a submission that has no result (yet).
type accepted struct {
	ID        string `json:"id"`
	Tenant    string `json:"tenant"`
	State     string `json:"state"` // "queued"
	Duplicate bool   `json:"duplicate,omitempty"`
	Session   string `json:"session,omitempty"`
}

// submitJob is POST /v1/jobs[?wait=]: submit a spec as the token's tenant,
// optionally in a session, and optionally wait for its result.
func (g *Gateway) submitJob(w http.ResponseWriter, r *http.Request, id Identity) error {
	wait, err := parseWait(r.URL.Query().Get("wait"), g.cfg.MaxWait)
	if err != nil {
		return err
	}
	spec, session, err := g.readSubmission(w, r, id)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if session != "" {
		vol, err := g.sessionVolume(ctx, id, session)
		if err != nil {
			return err
		}
		spec.Volume = vol
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels[LabelSession] = session
	}
	if spec.Heal == nil {
		spec.Heal = &job.HealPolicy{}
	}
	if spec.Heal.Mode == "" {
		spec.Heal.Mode = g.cfg.HealMode
	}
	c, err := g.tenantClient(ctx, id)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, requestTimeout)
	sub, err := c.Submit(sctx, spec)
	cancel()
	if err != nil {
		return err
	}
	if wait > 0 {
		if res, done, err := waitResult(ctx, c, sub.ID, wait); err != nil || done {
			if err != nil {
				return err
			}
			return writeJSON(w, http.StatusOK, res)
		}
	}
	w.Header().Set("Location", "/v1/jobs/"+sub.ID)
	return writeJSON(w, http.StatusAccepted, accepted{ID: sub.ID, Tenant: id.Tenant, State: "queued",
		Duplicate: sub.Duplicate, Session: session})
}

// waitResult waits up to wait for job id's result; done is false when the
// wait ended first.
func waitResult(ctx context.Context, c *client.Client, id string, wait time.Duration) (job.Result, bool, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := c.Wait(wctx, id)
	switch {
	case err == nil:
		return res, true, nil
	case wctx.Err() != nil && ctx.Err() == nil:
		return job.Result{}, false, nil
	}
	return job.Result{}, false, err
}

// readSubmission reads and decodes the body of a POST /v1/jobs: a job
// spec (job.Decode, strict) plus the gateway's own "session".
func (g *Gateway) readSubmission(w http.ResponseWriter, r *http.Request, id Identity) (job.Spec, string, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return job.Spec{}, "", &apiError{Status: http.StatusUnsupportedMediaType, Code: codeUnsupportedMedia,
				Message: fmt.Sprintf("the body is %q; send a JSON job spec as application/json", ct)}
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		return job.Spec{}, "", bodyError(err, g.cfg.MaxBodyBytes)
	}
	session, specDoc, err := splitSession(data)
	if err != nil {
		return job.Spec{}, "", err
	}
	spec, err := job.Decode(specDoc)
	if err != nil {
		e := &apiError{Status: http.StatusBadRequest, Code: codeInvalidRequest, Message: "the job spec is invalid: " +
			"fix the fields listed (docs/job-contract.md, or the JobSubmission schema of /v1/openapi.json)",
			Fields: job.FieldErrors(err), Err: err}
		if !json.Valid(data) {
			e.Code, e.Message = codeMalformedJSON, "the body is not one well-formed JSON object"
		}
		return job.Spec{}, "", e
	}
	var fields []job.FieldError
	if spec.Tenant != "" && spec.Tenant != id.Tenant {
		fields = append(fields, job.FieldError{Field: "tenant", Message: fmt.Sprintf(
			"%q is not your tenant; the tenant comes from your token (you are %q): leave tenant out", spec.Tenant, id.Tenant)})
	}
	if session != "" {
		if err := checkAPISessionName(session); err != nil {
			fields = append(fields, job.FieldError{Field: "session", Message: err.Error()})
		}
		if spec.Volume != nil {
			fields = append(fields, job.FieldError{Field: "volume",
				Message: "a job of a session runs in the session's workspace: leave volume out, or leave session out"})
		}
	}
	if spec.Volume != nil && strings.HasPrefix(spec.Volume.Name, sessionVolumePrefix) {
		// A session's workspace is mounted only with the session's quota.
		fields = append(fields, job.FieldError{Field: "volume.name",
			Message: fmt.Sprintf("%q is a session's workspace: use \"session\" instead of naming its volume", truncate(spec.Volume.Name, 40))})
	}
	if len(fields) > 0 {
		return job.Spec{}, "", invalidFields("the submission is invalid", fields)
	}
	return spec, session, nil
}

// splitSession takes the gateway's own top-level member "session" out of
// a submission and returns its value and the rest, the job spec, byte for
// byte as sent otherwise (job.Decode then sees exactly what the client
// wrote). A document that is not a well-formed JSON object is returned as
// it is, for job.Decode to say what is wrong with it.
func splitSession(data []byte) (session string, spec []byte, err error) {
	if !json.Valid(data) {
		return "", data, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", data, nil
	}
	from, to := int64(-1), int64(-1)
	for first := true; dec.More(); first = false {
		start := dec.InputOffset() // after '{' or after the previous value, before its ','
		tok, err := dec.Token()
		if err != nil {
			return "", data, nil
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", data, nil
		}
		if tok != "session" {
			continue
		}
		if from >= 0 {
			return "", nil, invalidFields("the submission is invalid", []job.FieldError{{Field: "session",
				Message: "duplicate key; each key may appear once"}})
		}
		if err := json.Unmarshal(raw, &session); err != nil {
			return "", nil, invalidFields("the submission is invalid", []job.FieldError{{Field: "session",
				Message: "expected a string (the session's name)"}})
		}
		from, to = start, dec.InputOffset()
		if first {
			// The member's ',' follows it: cut it too.
			for to < int64(len(data)) && strings.IndexByte(" \t\r\n", data[to]) >= 0 {
				to++
			}
			if to < int64(len(data)) && data[to] == ',' {
				to++
			}
		}
	}
	if from < 0 {
		return "", data, nil
	}
	if session == "" {
		return "", nil, invalidFields("the submission is invalid", []job.FieldError{{Field: "session",
			Message: "must not be empty: name the session, or leave session out"}})
	}
	spec = append(append(make([]byte, 0, len(data)), data[:from]...), data[to:]...)
	return session, spec, nil
}

// bodyError explains a failed read of a request body.
func bodyError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	var nerr interface{ Timeout() bool }
	switch {
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: codeBodyTooLarge, Err: err,
			Message: fmt.Sprintf("the body is over %d bytes; a job spec is at most %d: put large inputs in the "+
				"tenant's input bucket (paddock put) and name them in files[].ref", limit, job.MaxSpecBytes)}
	case errors.As(err, &nerr) && nerr.Timeout():
		return &apiError{Status: http.StatusRequestTimeout, Code: codeRequestTimeout, Err: err,
			Message: "the body did not arrive in time; send it whole, without pauses"}
	}
	return &apiError{Status: http.StatusBadRequest, Code: codeInvalidRequest, Err: err,
		Message: "the body could not be read: " + err.Error()}
}

// maxSessionName bounds a session name.
const maxSessionName = 64

// checkAPISessionName checks the "session" of a submission: 1-64 of
// [a-z0-9-], starting with a letter or digit.
func checkAPISessionName(name string) error {
	if name == "" || len(name) > maxSessionName {
		return fmt.Errorf("must be 1 to %d characters of [a-z0-9-]", maxSessionName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' && i > 0) {
			return fmt.Errorf("%q: use [a-z0-9-], starting with a letter or digit", truncate(name, 40))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseWait reads ?wait=: a Go duration ("30s", "2m") or whole seconds
// ("30"), at most max (a longer wait is cut to max); "" is no wait.
func parseWait(v string, max time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseUint(v, 10, 32)
		d, err = time.Duration(n)*time.Second, nerr
	}
	if err != nil || d < 0 {
		return 0, invalidFields("the query is invalid", []job.FieldError{{Field: "wait",
			Message: fmt.Sprintf("%q is not a wait: give seconds (30) or a duration (30s, 2m), at most %s", truncate(v, 40), max)}})
	}
	return min(d, max), nil
}

// getJob is GET /v1/jobs/{id}[?wait=]: the job's result.
func (g *Gateway) getJob(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, err := jobID(r)
	if err != nil {
		return err
	}
	wait, err := parseWait(r.URL.Query().Get("wait"), g.cfg.MaxWait)
	if err != nil {
		return err
	}
	c, err := g.tenantClient(r.Context(), id)
	if err != nil {
		return err
	}
	var res job.Result
	if wait > 0 {
		var done bool
		if res, done, err = waitResult(r.Context(), c, jid, wait); err == nil && !done {
			err = fmt.Errorf("%w: %s", client.ErrNotFinished, jid)
		}
	} else {
		res, err = c.Get(r.Context(), jid)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// jobClient is the job id of r's path and the client of id's tenant.
func (g *Gateway) jobClient(r *http.Request, id Identity) (string, *client.Client, error) {
	jid, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	c, err := g.tenantClient(r.Context(), id)
	return jid, c, err
}

// cancelJob is DELETE /v1/jobs/{id}: cancel the job.
func (g *Gateway) cancelJob(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, c, err := g.jobClient(r, id)
	if err != nil {
		return err
	}
	reply, err := c.Cancel(r.Context(), jid)
	if err != nil {
		return err
	}
	switch reply.Outcome {
	case job.CancelFlagged:
		return &apiError{Status: http.StatusNotFound, Code: codeNotFound, Message: fmt.Sprintf(
			"no job %s of tenant %s is queued, running or finished; if it was submitted a moment ago and is "+
				"still waiting to be scheduled, the cancel flag set now makes it end canceled", jid, id.Tenant)}
	case job.CancelKilling:
		return writeJSON(w, http.StatusAccepted, reply)
	}
	return writeJSON(w, http.StatusOK, reply)
}

// getOutput is GET /v1/jobs/{id}/output/{stream}: the kept stdout or
// stderr, streamed.
func (g *Gateway) getOutput(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, err := jobID(r)
	if err != nil {
		return err
	}
	stream := r.PathValue("stream")
	if stream != "stdout" && stream != "stderr" {
		return invalidFields("the path is invalid", []job.FieldError{{Field: "stream",
			Message: fmt.Sprintf("%q: want stdout or stderr", truncate(stream, 40))}})
	}
	c, err := g.tenantClient(r.Context(), id)
	if err != nil {
		return err
	}
	body, err := c.Output(r.Context(), jid, stream)
	if err != nil {
		return err
	}
	defer body.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	return g.copyBody(w, r, body)
}

// artifactList is GET /v1/jobs/{id}/artifacts's answer.
type artifactList struct {
	Artifacts []job.Object  `json:"artifacts"`
	Refused   []job.Refusal `json:"refused"`
}

// listArtifacts is GET /v1/jobs/{id}/artifacts.
func (g *Gateway) listArtifacts(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, c, err := g.jobClient(r, id)
	if err != nil {
		return err
	}
	objs, refused, err := c.Artifacts(r.Context(), jid)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, artifactList{Artifacts: nonNil(objs), Refused: nonNil(refused)})
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// getArtifact is GET /v1/jobs/{id}/artifacts/{path...}: one artifact,
// streamed, with its size and its sha256 as ETag.
func (g *Gateway) getArtifact(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, c, err := g.jobClient(r, id)
	if err != nil {
		return err
	}
	p := r.PathValue("path")
	body, err := c.Artifact(r.Context(), jid, p)
	if err != nil {
		return err
	}
	defer body.Close()
	h := w.Header()
	if objs, _, err := c.Artifacts(r.Context(), jid); err == nil {
		for _, o := range objs {
			if o.Path == p {
				h.Set("Content-Length", strconv.FormatInt(o.Bytes, 10))
				h.Set("ETag", strconv.Quote(o.SHA256))
			}
		}
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	return g.copyBody(w, r, body)
}

// copyBody streams body as the response, each write bounded by
// writeStall. A failure once bytes are out cuts the connection, so that
// the client sees a broken transfer, never a short file that looks whole.
func (g *Gateway) copyBody(w http.ResponseWriter, r *http.Request, body io.Reader) error {
	dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
	buf := make([]byte, 32<<10)
	n, err := io.CopyBuffer(dw, body, buf)
	if err == nil {
		return nil
	}
	if n == 0 && !dw.wrote {
		return err
	}
	g.log.Warn("download cut", "path", r.URL.Path, "bytes", n, "err", err)
	panic(http.ErrAbortHandler)
}

// deleteSession is DELETE /v1/sessions/{name}: end the session and
// delete its workspace.
func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request, id Identity) error {
	name := r.PathValue("name")
	if err := checkAPISessionName(name); err != nil {
		return invalidFields("the path is invalid", []job.FieldError{{Field: "name", Message: err.Error()}})
	}
	// Detached from the request: a client or proxy that gives up must not
	// leave the session claimed half way (its name would answer 409 until
	// the claim goes stale).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.endTimeout())
	defer cancel()
	if err := g.endSession(ctx, id, name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// getOpenAPI is GET /v1/openapi.json.
func (g *Gateway) getOpenAPI(w http.ResponseWriter, r *http.Request, _ Identity) error {
	doc, err := openapiDoc()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(doc))
	return nil
}

// The codes of the API's errors (errorBody.Error.Code; openapi.json lists
// them in the Error schema).
const (
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeRateLimited      = "rate_limited"
	codeTooManyStreams   = "too_many_streams"
	codeQuota            = "quota_exceeded"
	codeTooManySessions  = "too_many_sessions"
	codeInvalidRequest   = "invalid_request"
	codeMalformedJSON    = "malformed_json"
	codeBodyTooLarge     = "body_too_large"
	codeUnsupportedMedia = "unsupported_media_type"
	codeRequestTimeout   = "request_timeout"
	codeMethodNotAllowed = "method_not_allowed"
	codeNotFound         = "not_found"
	codeNoResult         = "no_result"
	codeNotKept          = "not_kept"
	codeNotArtifact      = "not_artifact"
	codeNoSession        = "no_session"
	codeSessionEnding    = "session_ending"
	codeStreamFull       = "stream_full"
	codeNoStream         = "no_stream"
	codeUnavailable      = "unavailable"
	codeTimeout          = "timeout"
	codeInternal         = "internal"
)

// apiError is a failure the API answers with Status and an errorBody.
type apiError struct {
	Status  int
	Code    string
	Message string
	Fields  []job.FieldError
	// RetryAfter, when set, is sent as Retry-After (whole seconds, at
	// least 1).
	RetryAfter time.Duration
	Err        error // the cause, for logs
}

func (e *apiError) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

func (e *apiError) Unwrap() error { return e.Err }

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string           `json:"code"`
	Message string           `json:"message"`
	Fields  []job.FieldError `json:"fields,omitempty"`
}

func invalidFields(msg string, fields []job.FieldError) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: codeInvalidRequest, Message: msg + ": fix the fields listed", Fields: fields}
}

// classify maps an error of a handler, the SDK or the session store to
// the API's answer.
func classify(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var nk *client.NotKeptError
	var we *WorkspaceError
	var ce *SessionCapError
	e := &apiError{Status: http.StatusInternalServerError, Code: codeInternal, Message: err.Error(), Err: err}
	switch {
	case errors.Is(err, client.ErrNotFinished) || errors.As(err, &nk) && !nk.Finished:
		e.Status, e.Code = http.StatusNotFound, codeNoResult
		e.Message = "no result yet: the job is queued or running, or your tenant has no job of this id " +
			"(a result is stored when a job ends): wait for it with GET /v1/jobs/{id}?wait=30s or follow " +
			"GET /v1/jobs/{id}/events (" + err.Error() + ")"
	case errors.Is(err, client.ErrNotKept):
		e.Status, e.Code = http.StatusNotFound, codeNotKept
	case errors.Is(err, client.ErrNotArtifact):
		e.Status, e.Code = http.StatusNotFound, codeNotArtifact
	case errors.Is(err, ErrNoSession):
		e.Status, e.Code = http.StatusNotFound, codeNoSession
	case errors.Is(err, ErrSessionEnding):
		e.Status, e.Code, e.RetryAfter = http.StatusConflict, codeSessionEnding, 5*time.Second
	case errors.Is(err, ErrSessionName):
		e.Status, e.Code = http.StatusBadRequest, codeInvalidRequest
	case errors.As(err, &ce):
		e.Status, e.Code = http.StatusTooManyRequests, codeTooManySessions
	case errors.As(err, &we):
		e.Status, e.Code, e.RetryAfter = http.StatusServiceUnavailable, codeUnavailable, 5*time.Second
	case errors.Is(err, job.ErrInvalid):
		e.Status, e.Code, e.Fields = http.StatusBadRequest, codeInvalidRequest, job.FieldErrors(err)
	case errors.Is(err, client.ErrQuota):
		e.Status, e.Code = http.StatusTooManyRequests, codeQuota
	case errors.Is(err, client.ErrStreamFull):
		e.Status, e.Code, e.RetryAfter = http.StatusServiceUnavailable, codeStreamFull, 30*time.Second
	case errors.Is(err, client.ErrPermission):
		e.Status, e.Code = http.StatusForbidden, codeForbidden
	case errors.Is(err, client.ErrNoStream):
		e.Status, e.Code = http.StatusServiceUnavailable, codeNoStream
	case errors.Is(err, client.ErrNoCanceler):
		e.Status, e.Code, e.RetryAfter = http.StatusServiceUnavailable, codeUnavailable, 5*time.Second
	case errors.Is(err, context.DeadlineExceeded):
		e.Status, e.Code = http.StatusGatewayTimeout, codeTimeout
		e.Message = "the fleet did not answer in time (" + err.Error() + "); retry"
	case errors.Is(err, context.Canceled):
		e.Status, e.Code = http.StatusServiceUnavailable, codeUnavailable
	}
	return e
}

// fail answers the request with err, unless the answer has started (a
// stream): then it only logs.
func (g *Gateway) fail(rec *statusRecorder, r *http.Request, err error) {
	e := classify(err)
	switch {
	case r.Context().Err() != nil && errors.Is(err, context.Canceled):
		g.log.Debug("API request ended: the client went away", "path", r.URL.Path, "err", err)
	case e.Status >= 500:
		g.log.Warn("API request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", err)
	}
	if rec.status != 0 {
		g.log.Debug("API request failed after its answer started", "path", r.URL.Path, "err", err)
		return
	}
	writeError(rec, e)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(max(1, (e.RetryAfter+time.Second-1)/time.Second)), 10))
	}
	// A download's headers may be set already; an error is JSON.
	w.Header().Del("Content-Length")
	w.Header().Del("Content-Disposition")
	w.Header().Del("ETag")
	_ = writeJSON(w, e.Status, errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, Fields: e.Fields}})
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("gateway: encode the answer: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
	return nil
}

// statusRecorder notes the status and size of an answer.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
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
