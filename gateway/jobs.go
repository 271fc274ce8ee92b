package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

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
	spec.Heal.Mode = cmp.Or(spec.Heal.Mode, g.cfg.HealMode)
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
			Message: fmt.Sprintf("%q is a session's workspace: use \"session\" instead of naming its volume", job.Truncate(spec.Volume.Name, 40))})
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
			return fmt.Errorf("%q: use [a-z0-9-], starting with a letter or digit", job.Truncate(name, 40))
		}
	}
	return nil
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
			Message: fmt.Sprintf("%q is not a wait: give seconds (30) or a duration (30s, 2m), at most %s", job.Truncate(v, 40), max)}})
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
			Message: fmt.Sprintf("%q: want stdout or stderr", job.Truncate(stream, 40))}})
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
