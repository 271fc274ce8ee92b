package broker

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/job"
)

// TracerName is the instrumentation name of the default tracer and meter.
const TracerName = "github.com/paddockhq/paddock/broker"

// SpanCall is the name of the span of one call.
const SpanCall = "paddock.broker.call"

// Telemetry attribute names of the broker (the paddock.* vocabulary of
// job/attrs.go), on its spans and metrics.
const (
	AttrGrant     = "paddock.broker.grant"     // the grant (metrics: "unknown" for a Host that names none)
	AttrRule      = "paddock.broker.rule"      // the Rule of a refused or failed call, "" for a forwarded one
	AttrRedacted  = "paddock.broker.redacted"  // secrets removed from the response
	AttrBytesIn   = "paddock.broker.bytes_in"  // request body bytes sent upstream
	AttrBytesOut  = "paddock.broker.bytes_out" // response body bytes returned to the box
	AttrDirection = "paddock.broker.direction" // "in" (to the upstream) or "out" (to the box), on paddock.broker.bytes
)

// Metric names.
const (
	MetricCalls = "paddock.broker.calls" // counter, by tenant, grant, status and rule
	MetricBytes = "paddock.broker.bytes" // counter of body bytes, by tenant, grant and direction
)

// ErrConfig is wrapped by the errors of New about its arguments.
var ErrConfig = errors.New("broker: invalid config")

// ErrJob is wrapped by Serve's error for an unusable JobInfo.
var ErrJob = errors.New("broker: invalid job")

// Config configures a Broker; a zero field takes its default, filled in
// withDefaults.
type Config struct {
	// HTTPClient performs the calls. Default: a client with Go's default
	// transport (TLS verification on, TLS 1.2 at least, proxies from the
	// worker's environment). The broker uses a copy that follows no
	// redirect and keeps no cookie jar (cookies never pass from one job to
	// another); a client that skips TLS verification is refused.
	HTTPClient *http.Client
	// RootCAs are the CAs the default HTTPClient trusts (nil: the
	// system's), for upstreams behind a private CA: add it to
	// x509.SystemCertPool to trust both. Give RootCAs or HTTPClient, not
	// both.
	RootCAs *x509.CertPool
	// Logger, default slog.Default(); the broker logs with component=broker.
	Logger *slog.Logger
	// Tracer, default otel.Tracer(TracerName).
	Tracer trace.Tracer
	// Meter, default otel.Meter(TracerName).
	Meter metric.Meter
	// SigningKey signs the scoped tokens (LoadSigningKey). Default: a key
	// made at New, so that tokens of a restarted worker no longer verify;
	// give a key file to keep the published key across restarts.
	SigningKey ed25519.PrivateKey
	// Issuer is the "iss" of the tokens. Default DefaultIssuer.
	Issuer string
	// MaxInFlight bounds a job's calls in progress at once (each holds up
	// to its grant's max_request_bytes + max_response_bytes). Default 8.
	MaxInFlight int
	// MaxConns bounds a job's open connections to its socket; further
	// connections wait for one to close. Default 16.
	MaxConns int
	// Limiter holds the grants' rate buckets, one per grant and tenant.
	// Default: buckets in this process, so each worker of a fleet allows a
	// tenant the grant's whole rate; a RedisLimiter shares them fleet-wide.
	Limiter Limiter
	// Now, default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.HTTPClient != nil && c.RootCAs != nil {
		return c, fmt.Errorf("%w: give RootCAs or HTTPClient, not both (set the client's own TLS config instead)", ErrConfig)
	}
	if c.HTTPClient == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.RootCAs}
		t.MaxResponseHeaderBytes = 1 << 20
		c.HTTPClient = &http.Client{Transport: t}
	}
	if t, ok := c.HTTPClient.Transport.(*http.Transport); ok && t.TLSClientConfig != nil && t.TLSClientConfig.InsecureSkipVerify {
		return c, fmt.Errorf("%w: HTTPClient skips TLS verification: give it the CA of the real system instead (tls.Config.RootCAs)", ErrConfig)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "broker")
	if c.Tracer == nil {
		c.Tracer = otel.Tracer(TracerName)
	}
	if c.Meter == nil {
		c.Meter = otel.Meter(TracerName)
	}
	if c.SigningKey == nil {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return c, fmt.Errorf("%w: signing key: %w", ErrConfig, err)
		}
		c.SigningKey = k
	}
	if len(c.SigningKey) != ed25519.PrivateKeySize {
		return c, fmt.Errorf("%w: SigningKey is %d bytes, not an Ed25519 private key (%d)", ErrConfig, len(c.SigningKey), ed25519.PrivateKeySize)
	}
	if c.Issuer == "" {
		c.Issuer = DefaultIssuer
	}
	if c.MaxInFlight < 0 {
		return c, fmt.Errorf("%w: MaxInFlight %d is negative", ErrConfig, c.MaxInFlight)
	}
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 8)
	if c.MaxConns < 0 {
		return c, fmt.Errorf("%w: MaxConns %d is negative", ErrConfig, c.MaxConns)
	}
	c.MaxConns = cmp.Or(c.MaxConns, 16)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Limiter == nil {
		c.Limiter = newLocalLimiter(c.Now)
	}
	return c, nil
}

// Broker performs the calls of jobs' boxes under the policy's grants. It is
// safe for concurrent use: one Serve per running job.
type Broker struct {
	cfg     Config
	policy  atomic.Pointer[Policy]
	secrets Secrets
	client  *http.Client
	signer  *signer
	calls   metric.Int64Counter
	bytes   metric.Int64Counter
}

// New makes a Broker of policy (not nil: a fleet without a policy runs no
// broker) taking secrets from secrets.
func New(policy *Policy, secrets Secrets, cfg Config) (*Broker, error) {
	if policy == nil {
		return nil, fmt.Errorf("%w: no policy: %s", ErrConfig, job.NoBroker)
	}
	if secrets == nil {
		return nil, fmt.Errorf("%w: no secret source: use NewDirSecrets or NewEnvSecrets", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	client := *cfg.HTTPClient
	client.Jar = nil
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	b := &Broker{cfg: cfg, secrets: secrets, client: &client, signer: newSigner(cfg.SigningKey, cfg.Issuer)}
	b.policy.Store(policy)
	var errs [2]error
	b.calls, errs[0] = cfg.Meter.Int64Counter(MetricCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Calls of jobs to the secrets broker, by tenant, grant, status and rule."))
	b.bytes, errs[1] = cfg.Meter.Int64Counter(MetricBytes, metric.WithUnit("By"),
		metric.WithDescription("Body bytes through the secrets broker, by tenant, grant and direction (in: to the upstream, out: to the box)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("%w: metrics: %w", ErrConfig, err)
	}
	return b, nil
}

// SetPolicy replaces the policy (the worker reloads its file on SIGHUP).
// Calls already admitted finish under the old one; every later call of
// every job, running ones included, follows the new one.
func (b *Broker) SetPolicy(p *Policy) error {
	if p == nil {
		return fmt.Errorf("%w: no policy: to turn the broker off, stop serving jobs", ErrConfig)
	}
	b.policy.Store(p)
	return nil
}

// Policy returns the policy in force.
func (b *Broker) Policy() *Policy { return b.policy.Load() }

// CheckSecrets returns an error (wrapping the source's) for every secret
// the policy uses that the source cannot give: the worker calls it at start
// and after a reload, so that a missing secret shows there, not in a job.
func (b *Broker) CheckSecrets(ctx context.Context) error {
	var errs []error
	for _, name := range b.Policy().Secrets() {
		v, err := b.secrets.Secret(ctx, name)
		switch {
		case err != nil:
			errs = append(errs, err)
		case checkValue(v) != "":
			errs = append(errs, fmt.Errorf("%w: secret %q %s", ErrSecretSource, name, checkValue(v)))
		}
	}
	return errors.Join(errs...)
}

// JWKS returns the JSON Web Key Set (RFC 7517) of the key that signs the
// scoped tokens, for downstream services to verify them.
func (b *Broker) JWKS() []byte { return b.signer.jwks() }

// JobInfo is the job a Serve call serves.
type JobInfo struct {
	Tenant string // empty: job.DefaultTenant
	ID     string
	// Grants are the grants the job asked for: the broker refuses every
	// other grant, even one its tenant has.
	Grants []string
	// Deadline, if set, ends the job's grants (as the end of Serve's ctx).
	Deadline time.Time
	// Calls, if set, receives the record of every call.
	Calls *CallLog
}

func (j JobInfo) check() error {
	if j.ID == "" {
		return fmt.Errorf("%w: no job id", ErrJob)
	}
	if err := job.CheckTenant(j.Tenant); err != nil {
		return fmt.Errorf("%w: %w", ErrJob, err)
	}
	return nil
}

// Serve answers the calls of job j's box on ln (the worker gives a unix
// socket made for that box alone) until ctx ends or j.Deadline passes.
// Then every further call is refused, the listener and every connection are
// closed, and Serve returns once the calls in progress have ended (they are
// canceled). It returns nil when the job ended, or the listener's error.
// Serve closes ln in every case.
func (b *Broker) Serve(ctx context.Context, ln net.Listener, j JobInfo) error {
	if j.Tenant == "" {
		j.Tenant = job.DefaultTenant
	}
	j.Grants = slices.Clone(j.Grants)
	if err := j.check(); err != nil {
		_ = ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !j.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, j.Deadline)
		defer cancel()
	}
	s := b.newSession(j)
	srv := &http.Server{
		Handler:           s,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
		// A hostile box can make the server log at will: keep it quiet.
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState: s.connState,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(newLimitListener(ln, b.cfg.MaxConns)) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc: // the listener failed
	}
	// The end, in order: refuse new calls, cancel those in progress, close
	// the listener and every connection, wait for the calls to return.
	s.end()
	cancel()
	_ = srv.Close()
	if err == nil {
		err = <-errc
	}
	s.active.Wait()
	s.conns.Wait() // a connection's goroutine may linger briefly after Close
	s.flushSuppressed()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("broker: serving job %s: %w", job.Key(j.Tenant, j.ID), err)
}

// session is the broker's state for one job.
type session struct {
	b        *Broker
	j        JobInfo
	log      *slog.Logger
	inflight chan struct{}

	mu     sync.Mutex
	ended  bool
	active sync.WaitGroup // calls admitted before the end
	conns  sync.WaitGroup // connections not yet closed

	logLimit   *rate.Limiter // refusals logged per second
	suppressed atomic.Int64
}

func (b *Broker) newSession(j JobInfo) *session {
	return &session{
		b: b, j: j,
		log:      b.cfg.Logger.With(job.AttrJobID, j.ID, job.AttrTenant, j.Tenant),
		inflight: make(chan struct{}, b.cfg.MaxInFlight),
		logLimit: rate.NewLimiter(5, 20),
	}
}

// enter admits a call unless the job ended; the caller calls
// s.active.Done when it returns true.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.active.Add(1)
	return true
}

// connState counts the open connections: Add runs in the server's
// accepting goroutine, which has returned before Serve waits.
func (s *session) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Done()
	}
}

func (s *session) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

func (s *session) flushSuppressed() {
	if n := s.suppressed.Swap(0); n > 0 {
		s.log.Info("broker: refusals not logged (rate limit)", "count", n)
	}
}

// limitListener accepts at most cap(sem) connections open at once: a box
// cannot exhaust the worker's file descriptors.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
