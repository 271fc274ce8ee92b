package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// servedDoc is the document GET /v1/openapi.json serves, loaded and
// validated once.
var servedDoc = sync.OnceValues(func() (*openapi3.T, error) {
	raw, err := openapiDoc()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	// An event stream is text; sseCheck validates its events.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
	return doc, nil
})

func loadDoc(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := servedDoc()
	require.NoError(t, err, "openapi.json, with the job's schemas merged in, must be a valid OpenAPI 3.1 document")
	return doc
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadDoc(t)
	assert.Equal(t, "3.1.0", doc.OpenAPI)
	for _, name := range []string{"Spec", "Spec.limits", "Spec.volume", "Result", "Result.object", "JobSubmission", "Error"} {
		assert.Contains(t, doc.Components.Schemas, name)
	}
	sub := doc.Components.Schemas["JobSubmission"].Value
	require.NotNil(t, sub)
	assert.Contains(t, sub.Properties, "session")
	assert.Contains(t, sub.Properties, "command", "JobSubmission is the job's Spec plus session")
	assert.NotContains(t, doc.Components.Schemas["Spec"].Value.Properties, "session")

	// Every code the gateway answers with is in the Error schema's enum.
	var codes []any
	for _, c := range []string{codeUnauthorized, codeForbidden, codeRateLimited, codeTooManyStreams, codeQuota, codeTooManySessions,
		codeInvalidRequest, codeMalformedJSON, codeBodyTooLarge, codeUnsupportedMedia, codeRequestTimeout,
		codeMethodNotAllowed, codeNotFound, codeNoResult, codeNotKept, codeNotArtifact, codeNoSession,
		codeSessionEnding, codeStreamFull, codeNoStream, codeUnavailable, codeTimeout, codeInternal} {
		codes = append(codes, c)
	}
	enum := doc.Components.Schemas["Error"].Value.Properties["error"].Value.Properties["code"].Value.Enum
	assert.ElementsMatch(t, codes, enum)
}

// docPath is the OpenAPI path of a ServeMux pattern.
func docPath(pattern string) string { return strings.ReplaceAll(pattern, "...}", "}") }

// outsideRoutes are the operations Handler serves outside routes().
var outsideRoutes = []apiRoute{{method: http.MethodGet, pattern: "/healthz", public: true}}

// TestOpenAPIRoutes checks that the document and the routes agree: every
// route is documented, every documented operation is a route, and the
// served handler answers each (a token is checked where the document
// says so).
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadDoc(t)
	var registered, documented []string
	for _, rt := range append(slices.Clone(apiRoutes), outsideRoutes...) {
		registered = append(registered, rt.method+" "+docPath(rt.pattern))
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	assert.ElementsMatch(t, registered, documented)

	g := bareGateway(t, nil)
	h := g.Handler()
	for _, rt := range append(slices.Clone(apiRoutes), outsideRoutes...) {
		op := doc.Paths.Find(docPath(rt.pattern)).GetOperation(rt.method)
		require.NotNil(t, op, rt.pattern)
		public := op.Security != nil && len(*op.Security) == 0
		assert.Equal(t, rt.public, public, "%s %s: public in the document and in routes", rt.method, rt.pattern)
		url := strings.NewReplacer("{id}", "j1", "{stream}", "stdout", "{path...}", "a/b.txt", "{name}", "s1").Replace(rt.pattern)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(rt.method, url, nil))
		if public {
			assert.Equal(t, http.StatusOK, rec.Code, url)
		} else {
			assert.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s without a token", rt.method, url)
		}
	}
}

// TestOpenAPIServed checks GET /v1/openapi.json serves the merged
// document, without a token.
func TestOpenAPIServed(t *testing.T) {
	g := bareGateway(t, nil)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: newAPICheck(t, http.DefaultTransport)}
	resp, err := hc.Get(srv.URL + "/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	want, err := openapiDoc()
	require.NoError(t, err)
	assert.Equal(t, want, body)
	assert.Contains(t, string(body), `"Result.attempt"`, "the job's schemas are merged in")
}

// apiCheck is an http.RoundTripper that validates every request it sends
// and every response it gets against the served OpenAPI document: the
// request's operation must be documented, and its parameters and body
// valid (unless the test marked it invalid on purpose); the response's
// status must be documented for the operation, and its headers and body
// valid; each event of an event stream is validated against its schema.
type apiCheck struct {
	t   testing.TB
	doc *openapi3.T
	rt  http.RoundTripper
	mux *http.ServeMux // the routes, to find a request's operation
}

func newAPICheck(t testing.TB, rt http.RoundTripper) *apiCheck {
	c := &apiCheck{t: t, doc: loadDoc(t), rt: rt, mux: http.NewServeMux()}
	for _, r := range append(slices.Clone(apiRoutes), outsideRoutes...) {
		r := r
		c.mux.HandleFunc(r.method+" "+r.pattern, func(_ http.ResponseWriter, req *http.Request) {
			m := req.Context().Value(routeMatchKey{}).(*routeMatch)
			m.route = &r
			m.params = map[string]string{}
			for _, name := range wildcards.FindAllStringSubmatch(r.pattern, -1) {
				m.params[name[1]] = req.PathValue(name[1])
			}
		})
	}
	return c
}

var wildcards = regexp.MustCompile(`\{([a-z]+)(?:\.\.\.)?\}`)

type routeMatchKey struct{}

type routeMatch struct {
	route  *apiRoute
	params map[string]string
}

type invalidOnPurposeKey struct{}

// invalidOnPurpose marks a request that breaks the document on purpose:
// only its response is validated.
func invalidOnPurpose(ctx context.Context) context.Context {
	return context.WithValue(ctx, invalidOnPurposeKey{}, true)
}

func (c *apiCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	in := c.requestInput(req, body)
	if in == nil {
		return c.rt.RoundTrip(req)
	}
	if req.Context().Value(invalidOnPurposeKey{}) == nil {
		if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
			c.t.Errorf("openapi: request %s %s does not conform: %v", req.Method, req.URL.Path, err)
		}
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &sseCheck{c: c, in: in, resp: resp, body: resp.Body}
		return resp, nil
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if err != nil {
		return resp, nil // the test sees the cut body; there is nothing whole to validate
	}
	c.checkResponse(in, resp, data)
	return resp, nil
}

// requestInput finds req's operation; nil (and a test error) when none.
func (c *apiCheck) requestInput(req *http.Request, body []byte) *openapi3filter.RequestValidationInput {
	m := &routeMatch{}
	probe := req.Clone(context.WithValue(req.Context(), routeMatchKey{}, m))
	probe.Body = http.NoBody
	c.mux.ServeHTTP(httptest.NewRecorder(), probe)
	if m.route == nil {
		c.t.Errorf("openapi: %s %s is no operation of the API", req.Method, req.URL.Path)
		return nil
	}
	path := docPath(m.route.pattern)
	item := c.doc.Paths.Find(path)
	if item == nil || item.GetOperation(m.route.method) == nil {
		c.t.Errorf("openapi: %s %s is not documented", m.route.method, path)
		return nil
	}
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	return &openapi3filter.RequestValidationInput{
		Request:    vreq,
		PathParams: m.params,
		Route: &routers.Route{Spec: c.doc, Path: path, PathItem: item, Method: m.route.method,
			Operation: item.GetOperation(m.route.method)},
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
}

func (c *apiCheck) checkResponse(in *openapi3filter.RequestValidationInput, resp *http.Response, body []byte) {
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(in.Request.Context(), out); err != nil {
		c.t.Errorf("openapi: response %d to %s %s does not conform: %v\nbody: %.2000s",
			resp.StatusCode, in.Request.Method, in.Request.URL.Path, err, body)
	}
}

// sseCheck validates an event stream as it is read: each event's data
// against its schema, and the whole response when the body ends.
type sseCheck struct {
	c    *apiCheck
	in   *openapi3filter.RequestValidationInput
	resp *http.Response
	body io.ReadCloser
	buf  bytes.Buffer
	done bool
}

func (s *sseCheck) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	s.buf.Write(p[:n])
	if err == io.EOF {
		s.finish(true)
	}
	return n, err
}

func (s *sseCheck) Close() error {
	s.finish(false)
	return s.body.Close()
}

// sseSchemas are the schemas of the events' data.
var sseSchemas = map[string]string{"output": "OutputEvent", "result": "Result", "error": "Error"}

func (s *sseCheck) finish(whole bool) {
	if s.done {
		return
	}
	s.done = true
	if whole {
		s.c.checkResponse(s.in, s.resp, s.buf.Bytes())
	}
	for _, ev := range parseSSE(s.buf.Bytes()) {
		name, ok := sseSchemas[ev.name]
		if !ok {
			s.c.t.Errorf("openapi: event %q is not documented", ev.name)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(ev.data), &v); err != nil {
			s.c.t.Errorf("openapi: event %s: data is not JSON: %v", ev.name, err)
			continue
		}
		if err := s.c.doc.Components.Schemas[name].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			s.c.t.Errorf("openapi: event %s does not conform to %s: %v\ndata: %.2000s", ev.name, name, err, ev.data)
		}
	}
}

// parsedEvent is one server-sent event.
type parsedEvent struct{ name, id, data string }

// parseSSE parses the complete events of a stream (comments are skipped;
// a last event not ended by a blank line is left out).
func parseSSE(b []byte) []parsedEvent {
	var out []parsedEvent
	var cur parsedEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = parsedEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}
