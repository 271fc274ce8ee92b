package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
)

// ServeHTTP answers one call of the box.
func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	entered := s.enter()
	if entered {
		defer s.active.Done() // last: Serve returns after the record and the span
	}
	start := s.b.cfg.Now()
	c := Call{Start: start, Grant: job.Truncate(hostName(r.Host), 64), Method: job.Truncate(r.Method, 16)}
	ctx, span := s.b.cfg.Tracer.Start(r.Context(), SpanCall, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String(job.AttrJobID, s.j.ID), attribute.String(job.AttrTenant, s.j.Tenant)))
	defer span.End()
	red := s.redactor(ctx, nil, nil)
	var ref *refusal
	if entered {
		ref = s.call(ctx, w, r, &c)
	} else {
		ref = forbidden(RuleEnded, "the job ended, and its grants with it")
	}
	if ref != nil {
		ref.msg = red.string(ref.msg) // also a message quoting the upstream
		writeRefusal(w, ref, &c)
	}
	c.DurationMS = s.b.cfg.Now().Sub(start).Milliseconds()
	c.Path = red.string(c.Path)
	c.Error = red.string(c.Error)
	s.record(ctx, span, c)
}

// hostName is the grant name a Host header names: lower case, no port.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(host)
}

// call checks r against the policy and forwards it. It returns the refusal
// to answer, or nil once it has answered.
func (s *session) call(ctx context.Context, w http.ResponseWriter, r *http.Request, c *Call) *refusal {
	g, t, ref := s.admit(r, c)
	if ref != nil {
		return ref
	}
	if ref := s.allow(ctx, w, g); ref != nil {
		return ref
	}
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		return refuse(http.StatusTooManyRequests, RuleInFlight, fmt.Sprintf(
			"grant %s: this job already has %d calls in progress: wait for one to end", g.name, cap(s.inflight)))
	}
	body, ref := readBody(w, r, g)
	if ref != nil {
		return ref
	}
	c.BytesIn = int64(len(body))
	return s.forward(ctx, w, r, g, t, body, c)
}

// allow takes a call from the rate of g for the job's tenant, shared by
// all the tenant's jobs, then from the rate of each credential g injects
// that the policy limits (secret_rates), shared by every grant and tenant.
func (s *session) allow(ctx context.Context, w http.ResponseWriter, g *grant) *refusal {
	ok, wait, err := s.b.cfg.Limiter.Allow(ctx, g.name+"/"+s.j.Tenant, g.rate, g.burst)
	if err != nil {
		return s.limiterFailed(w, g, err)
	}
	if !ok {
		return overRate(w, wait, fmt.Sprintf("grant %s: over its rate of %g calls/s (burst %d) for tenant %s", g.name, float64(g.rate), g.burst, s.j.Tenant))
	}
	for _, name := range g.secretRefs {
		sr, limited := s.b.Policy().secretRates[name]
		if !limited {
			continue
		}
		if ok, wait, err = s.b.cfg.Limiter.Allow(ctx, "secret:"+name, sr.rate, sr.burst); err != nil {
			return s.limiterFailed(w, g, err)
		}
		if !ok {
			return overRate(w, wait, fmt.Sprintf("grant %s: its credential %q is over its rate of %g calls/s (burst %d), shared by every grant and tenant using it",
				g.name, name, float64(sr.rate), sr.burst))
		}
	}
	return nil
}

// overRate is a 429 refusal: msg, and when to retry.
func overRate(w http.ResponseWriter, wait time.Duration, msg string) *refusal {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return refuse(http.StatusTooManyRequests, RuleRate, fmt.Sprintf("%s: retry after %ds", msg, secs))
}

// limiterFailed refuses a call whose rate the Limiter could not check.
func (s *session) limiterFailed(w http.ResponseWriter, g *grant, err error) *refusal {
	s.logRefusal(slog.LevelWarn, "broker: the rate limiter failed: calls are refused until it answers", "grant", g.name, "error", err.Error())
	w.Header().Set("Retry-After", "1")
	return refuse(http.StatusServiceUnavailable, RuleRate, fmt.Sprintf(
		"grant %s: the broker cannot check the grant's rate right now: retry later", g.name))
}

// admit finds the grant r names and checks it against the policy, the job
// and the grant's rules.
func (s *session) admit(r *http.Request, c *Call) (*grant, target, *refusal) {
	p := s.b.Policy()
	name := hostName(r.Host)
	g := p.grants[name]
	switch {
	case g == nil:
		return nil, target{}, forbidden(RuleUnknownGrant, fmt.Sprintf(
			"grant %s does not exist: the Host of a request names its grant, and this job's grants are: %s", short(name), list(s.j.Grants)))
	case p.check(s.j.Tenant, name) != nil:
		return nil, target{}, forbidden(RuleTenant, fmt.Sprintf("grant %s: tenant %s does not have it", name, s.j.Tenant))
	case !slices.Contains(s.j.Grants, name):
		return nil, target{}, forbidden(RuleNotRequested, fmt.Sprintf(
			"grant %s: this job did not ask for it (its grants: %s): add it to the job's \"grants\"", name, list(s.j.Grants)))
	case !slices.Contains(g.methods, r.Method):
		return nil, target{}, forbidden(RuleMethod, fmt.Sprintf(
			"grant %s: method %s not allowed (allowed: %s)", name, job.Truncate(r.Method, 16), strings.Join(g.methods, ", ")))
	}
	t, terr := cleanTarget(r.RequestURI)
	if terr != nil {
		rule := RulePath
		if !strings.HasPrefix(r.RequestURI, "/") {
			rule = RuleTarget
		}
		return nil, target{}, forbidden(rule, fmt.Sprintf("grant %s: %s", name, terr.msg))
	}
	c.Path, c.QueryKeys = job.Truncate(t.path, 256), t.queryKeys()
	if !g.allowsPath(t.segs) {
		return nil, target{}, forbidden(RulePath, fmt.Sprintf(
			"grant %s: path %s is outside the grant (allowed: %s)", name, short(t.path), g.patterns()))
	}
	return g, t, nil
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// readBody reads the request body, up to the grant's cap.
func readBody(w http.ResponseWriter, r *http.Request, g *grant) ([]byte, *refusal) {
	tooBig := func(n string) *refusal {
		return refuse(http.StatusRequestEntityTooLarge, RuleRequestSize, fmt.Sprintf(
			"grant %s: request body of %s bytes is over max_request_bytes (%d)", g.name, n, g.maxReq))
	}
	if r.ContentLength > g.maxReq {
		return nil, tooBig(strconv.FormatInt(r.ContentLength, 10))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxReq))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooBig("more than " + strconv.FormatInt(g.maxReq, 10))
	case err != nil:
		return nil, refuse(http.StatusBadRequest, RuleTarget, fmt.Sprintf("grant %s: reading the request body: %v", g.name, err))
	}
	return body, nil
}

// forward performs the call upstream and answers the box.
func (s *session) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, g *grant, t target, body []byte, c *Call) *refusal {
	var token string
	if g.token != nil {
		var err error
		if token, err = s.b.signer.mint(s.b.cfg.Now(), s.j, g); err != nil {
			return refuse(http.StatusBadGateway, RuleSecret, fmt.Sprintf("grant %s: minting its token failed: %v", g.name, err))
		}
	}
	injected, values, rendered, rerr := g.render(ctx, s.b.secrets, token)
	if rerr != nil {
		s.logRefusal(slog.LevelWarn, "broker: a grant's secret is unavailable: the operator must fix the secret source",
			"grant", g.name, "secret", rerr.secret, "error", rerr.msg)
		return refuse(http.StatusBadGateway, RuleSecret, fmt.Sprintf(
			"grant %s: its secret %q is unavailable on this worker: tell the operator", g.name, rerr.secret))
	}
	red := s.redactor(ctx, values, rendered)
	callCtx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	out, err := http.NewRequestWithContext(callCtx, r.Method, g.base.String(), bytes.NewReader(body))
	if err != nil {
		return refuse(http.StatusBadGateway, RuleUpstream, fmt.Sprintf("grant %s: %v", g.name, err))
	}
	out.URL = t.upstreamURL(g.base)
	out.ContentLength = int64(len(body))
	if len(body) == 0 {
		out.Body, out.GetBody = http.NoBody, nil
	}
	out.Header = outgoingHeaders(r.Header, g, injected)
	resp, err := s.b.client.Do(out)
	if err == nil && callCtx.Err() != nil {
		// net/http can hand back a response that raced the deadline (the
		// upstream answered as the connection closed): it came too late.
		resp.Body.Close()
		resp, err = nil, callCtx.Err()
	}
	if err != nil {
		return s.upstreamFailure(ctx, callCtx, g, err, red)
	}
	defer resp.Body.Close()
	return respond(w, r, g, out.URL, resp, c, red)
}

// upstreamFailure is the refusal of a call whose request failed.
func (s *session) upstreamFailure(ctx, callCtx context.Context, g *grant, err error, red *redactor) *refusal {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return forbidden(RuleEnded, fmt.Sprintf("grant %s: the job ended during the call", g.name))
	case callCtx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		return refuse(http.StatusGatewayTimeout, RuleTimeout, fmt.Sprintf(
			"grant %s: no answer within the grant's timeout (%s)", g.name, g.timeout))
	}
	return refuse(http.StatusBadGateway, RuleUpstream, fmt.Sprintf("grant %s: the request failed: %s", g.name, red.string(err.Error())))
}

// respond checks the upstream's response and returns it to the box,
// without a secret.
func respond(w http.ResponseWriter, r *http.Request, g *grant, reqURL *url.URL, resp *http.Response, c *Call, red *redactor) *refusal {
	if ref := checkResponse(r, g, resp, red); ref != nil {
		return ref
	}
	data, n, ref := readRedacted(g, resp, red)
	if ref != nil {
		return ref
	}
	h, dropped := responseHeaders(resp.Header, red)
	rewriteLocation(h, g, reqURL)
	for k, vs := range h {
		w.Header()[k] = vs
	}
	c.Redacted = n + dropped
	if c.Redacted > 0 {
		w.Header().Set(HeaderRedacted, strconv.Itoa(c.Redacted))
	}
	noBody := r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	switch {
	case r.Method == http.MethodHead && resp.ContentLength >= 0:
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	case !noBody:
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	}
	w.WriteHeader(resp.StatusCode)
	c.Status = resp.StatusCode
	if !noBody {
		nw, _ := w.Write(data)
		c.BytesOut = int64(nw)
	}
	return nil
}

// checkResponse refuses a response the broker cannot hand back whole and
// checked: a partial one (206: the box would get a secret in pieces, one
// call at a time; the broker never forwards Range, so an upstream that
// answers 206 cut the resource on its own), a compressed one it cannot
// read for secrets, a protocol switch, or one declared over the cap. What
// it quotes of the upstream's headers is redacted (before it is cut short).
func checkResponse(r *http.Request, g *grant, resp *http.Response, red *redactor) *refusal {
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, ce := range strings.Split(v, ",") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return refuse(http.StatusBadGateway, RuleEncoding, fmt.Sprintf(
					"grant %s: the upstream sent a %s-encoded body, which the broker cannot check for secrets", g.name, short(red.string(ce))))
			}
		}
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		return refuse(http.StatusBadGateway, RulePartial, fmt.Sprintf(
			"grant %s: the upstream answered with part of a resource (206), which the broker cannot check for secrets: ask for the whole resource", g.name))
	case resp.StatusCode == http.StatusSwitchingProtocols:
		return refuse(http.StatusBadGateway, RuleUpstream, fmt.Sprintf("grant %s: the upstream switched protocols", g.name))
	case r.Method != http.MethodHead && resp.ContentLength > g.maxResp:
		return tooBig(g)
	}
	return nil
}

func tooBig(g *grant) *refusal {
	return refuse(http.StatusBadGateway, RuleResponseSize, fmt.Sprintf(
		"grant %s: the response is over max_response_bytes (%d)", g.name, g.maxResp))
}

// readRedacted reads the response body, up to the grant's cap, through a
// redacting stream: the upstream's reads (chunks) may cut a secret
// anywhere. It returns the redacted body and the number of redactions.
func readRedacted(g *grant, resp *http.Response, red *redactor) ([]byte, int, *refusal) {
	var out bytes.Buffer
	st := red.stream(&out)
	nr, err := io.Copy(st, io.LimitReader(resp.Body, g.maxResp+1))
	if err == nil {
		err = st.Close()
	}
	switch {
	case err != nil:
		return nil, 0, refuse(http.StatusBadGateway, RuleUpstream, fmt.Sprintf("grant %s: reading the response: %s", g.name, red.string(err.Error())))
	case nr > g.maxResp:
		return nil, 0, tooBig(g)
	}
	return out.Bytes(), st.n, nil
}

// rewriteLocation turns a redirect to a URL under the grant's base into one
// the box can follow through the broker (http://<grant>/…). Other redirects
// stay as they are: the box cannot reach them, and the broker follows none.
func rewriteLocation(h http.Header, g *grant, reqURL *url.URL) {
	loc := h.Get("Location")
	if loc == "" {
		return
	}
	u, err := reqURL.Parse(loc)
	if err != nil {
		h.Del("Location")
		return
	}
	basePath := g.base.EscapedPath()
	rest, under := strings.CutPrefix(u.EscapedPath(), basePath)
	if u.Scheme != g.base.Scheme || u.Host != g.base.Host || !under || rest != "" && rest[0] != '/' {
		return
	}
	if rest == "" {
		rest = "/"
	}
	loc = "http://" + g.name + rest
	if u.RawQuery != "" {
		loc += "?" + u.RawQuery
	}
	h.Set("Location", loc)
}

func writeRefusal(w http.ResponseWriter, ref *refusal, c *Call) {
	h := w.Header()
	for k := range h {
		if k != "Retry-After" {
			delete(h, k)
		}
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set(HeaderRule, string(ref.rule))
	w.WriteHeader(ref.status)
	_, _ = io.WriteString(w, ref.msg+"\n")
	c.Status, c.Rule, c.Error = ref.status, ref.rule, ref.msg
}

// redactor finds every secret the policy uses, values (the secrets and the
// token this call injected) and rendered (its injected header values) in a
// response.
func (s *session) redactor(ctx context.Context, values, rendered []string) *redactor {
	all := slices.Clone(values)
	for _, name := range s.b.Policy().Secrets() {
		if v, err := s.b.secrets.Secret(ctx, name); err == nil {
			all = append(all, v)
		}
	}
	return newRedactor(all, rendered)
}

// record ends the call: its span, metrics, log line and record.
func (s *session) record(ctx context.Context, span trace.Span, c Call) {
	span.SetAttributes(
		attribute.String(AttrGrant, c.Grant),
		attribute.String("http.request.method", c.Method),
		attribute.String("url.path", c.Path),
		attribute.Int("http.response.status_code", c.Status),
		attribute.String(AttrRule, string(c.Rule)),
		attribute.Int64(AttrBytesIn, c.BytesIn),
		attribute.Int64(AttrBytesOut, c.BytesOut),
		attribute.Int(AttrRedacted, c.Redacted),
	)
	if c.Rule != "" {
		span.SetStatus(codes.Error, c.Error)
	}
	grantLabel := c.Grant
	if s.b.Policy().grants[c.Grant] == nil {
		grantLabel = "unknown" // the box chose the Host: keep the metric's labels bounded
	}
	base := []attribute.KeyValue{attribute.String(job.AttrTenant, s.j.Tenant), attribute.String(AttrGrant, grantLabel)}
	s.b.calls.Add(ctx, 1, metric.WithAttributes(append(base,
		attribute.Int("http.response.status_code", c.Status), attribute.String(AttrRule, string(c.Rule)))...))
	s.b.bytes.Add(ctx, c.BytesIn, metric.WithAttributes(append(base, attribute.String(AttrDirection, "in"))...))
	s.b.bytes.Add(ctx, c.BytesOut, metric.WithAttributes(append(base, attribute.String(AttrDirection, "out"))...))
	attrs := []any{"grant", c.Grant, "method", c.Method, "path", c.Path, "status", c.Status,
		"bytes_in", c.BytesIn, "bytes_out", c.BytesOut, "redacted", c.Redacted, "duration_ms", c.DurationMS}
	if c.Rule != "" {
		s.logRefusal(slog.LevelInfo, "broker: call refused", append(attrs, "rule", string(c.Rule), "error", c.Error)...)
	} else {
		s.log.Debug("broker: call", attrs...)
	}
	s.j.Calls.add(c)
}

// logRefusal logs at most 5 refusals per second per job (a box can make as
// many as it likes), counting the others.
func (s *session) logRefusal(level slog.Level, msg string, args ...any) {
	if !s.logLimit.Allow() {
		s.suppressed.Add(1)
		return
	}
	if n := s.suppressed.Swap(0); n > 0 {
		args = append(args, "suppressed_before", n)
	}
	s.log.Log(context.Background(), level, msg, args...)
}
