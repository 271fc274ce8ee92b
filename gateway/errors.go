package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

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
