package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/internal/redact"
	"github.com/paddockhq/paddock/job"
)

// ConnectConfig says how Connect reaches NATS. A zero field takes its
// default. It reads no environment: the CLI fills it from its flags and
// environment.
type ConnectConfig struct {
	// URL is one NATS server or a comma-separated list; a user and
	// password, or a token, may be in it (nats://user:pass@host:4222,
	// nats://token@host). Default nats.DefaultURL (nats://127.0.0.1:4222).
	URL string
	// Name is the connection's name in the server's monitoring. Default
	// "paddock-client".
	Name string
	// Creds is the path of a .creds file (a user JWT and its NKey seed, as
	// `nsc` and `paddock tenant` write them): operator-mode authentication.
	Creds string
	// NKey is the path of a file holding a user's NKey seed. At most one of
	// Creds and NKey.
	NKey string
	// TLSCA is a PEM file of the CAs to trust for the server's certificate
	// (default: the system's). TLSCert and TLSKey are the client's
	// certificate and key (PEM), for a server that verifies clients; both or
	// neither. Any of them turns TLS on.
	TLSCA, TLSCert, TLSKey string
	// Tenant, when set, makes the connection use the tenant's inbox prefix
	// (job.InboxPrefix): a tenant's credentials allow replies only there.
	// Pass the tenant of Creds or NKey (and the same to Config.Tenant).
	Tenant string
	// Logger, default slog.Default(); logs with component=nats.
	Logger *slog.Logger
	// Options are more nats.go options, applied after Connect's own.
	Options []nats.Option
}

// Connect connects to NATS the way every Paddock program and pipeline does:
// credentials and TLS from cfg, the tenant's inbox prefix, and unlimited
// reconnects 500ms apart (a NATS restart must not end a pipeline; requests
// made while disconnected wait in nats.go's buffer). ctx bounds the
// connect; the connection then lives until Close. Errors never show a
// secret: URLs are redacted (internal/redact), and credentials the server
// refused are named by their kind or file, never by their value.
func Connect(ctx context.Context, cfg ConnectConfig) (*nats.Conn, error) {
	cfg.URL = cmp.Or(cfg.URL, nats.DefaultURL)
	cfg.Name = cmp.Or(cfg.Name, "paddock-client")
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts, err := cfg.options(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: connect to NATS: %w", err)
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, cfg.connectErr(err)
	}
	return nc, nil
}

// options checks cfg and turns it into nats.go options.
func (cfg ConnectConfig) options(ctx context.Context) ([]nats.Option, error) {
	if err := CheckURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.Creds != "" && cfg.NKey != "" {
		return nil, fmt.Errorf("%w: give Creds (a .creds file) or NKey (a seed file), not both", ErrConfig)
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, fmt.Errorf("%w: TLSCert and TLSKey go together (a client certificate and its key)", ErrConfig)
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(d)), time.Millisecond)
	}
	// Reconnect forever, to any server of the URL list (nats.go shuffles
	// it), buffering up to 8 MiB of publishes meanwhile (the default). A
	// server that dies without closing the socket (a lost host, a
	// partition) is noticed after PingInterval × MaxPingsOutstanding:
	// 15 s, not nats.go's default 4 minutes.
	opts := append(cfg.handlers(), nats.Name(cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond), nats.Timeout(timeout),
		nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(3))
	if cfg.Tenant != "" {
		if err := job.CheckTenant(cfg.Tenant); err != nil {
			return nil, fmt.Errorf("%w: Tenant: %w", ErrConfig, err)
		}
		opts = append(opts, nats.CustomInboxPrefix(job.InboxPrefix(cfg.Tenant)))
	}
	switch {
	case cfg.Creds != "":
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	case cfg.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: NKey seed file %s: %w", ErrConfig, cfg.NKey, err)
		}
		opts = append(opts, opt)
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return append(opts, cfg.Options...), nil
}

// handlers log the connection's life: disconnects, reconnects, and the
// asynchronous errors the server reports (a permission violation, a slow
// consumer), at most a few of those every 10s.
func (cfg ConnectConfig) handlers() []nats.Option {
	log := cfg.Logger.With("component", "nats")
	errs := &rate.Sometimes{First: 3, Interval: 10 * time.Second}
	return []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", redact.URL(c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			errs.Do(func() {
				subject := ""
				if sub != nil {
					subject = sub.Subject
				}
				log.Warn("NATS reported an error", "err", err, "subject", subject)
			})
		}),
	}
}

// CheckURL parses each server of a NATS URL list the way nats.go does, so
// that a malformed one fails before anything connects, with a redacted
// message (the parser's own is left out when it could quote a password).
// The error wraps ErrConfig.
func CheckURL(raw string) error {
	for s := range strings.SplitSeq(raw, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		if _, err := url.Parse(s); err != nil {
			shown := redact.URL(raw)
			if shown != raw { // the parser's message could quote the password
				return fmt.Errorf("%w: NATS URL %q is not a valid URL; want nats://[user:password@]host[:port] or tls://…, comma-separated", ErrConfig, shown)
			}
			return fmt.Errorf("%w: NATS URL %q is not a valid URL (%v); want nats://[user:password@]host[:port] or tls://…, comma-separated", ErrConfig, raw, err)
		}
	}
	return nil
}

// connectError is a failed Connect: a message without secrets, and the
// nats.go error for errors.Is.
type connectError struct {
	msg string
	err error
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }

func (cfg ConnectConfig) connectErr(err error) error {
	at := redact.URL(cfg.URL)
	reason := scrub(err.Error(), cfg.URL)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return &connectError{err: err, msg: fmt.Sprintf("client: NATS at %s refused the credentials (%s: %s): check --creds / NATS_CREDS",
			at, cfg.credentials(), reason)}
	}
	return &connectError{err: err, msg: fmt.Sprintf("client: connect to NATS at %s: %s "+
		"(start one with `paddock up`, or set --nats-url / PADDOCK_NATS_URL)", at, reason)}
}

// credentials names the credentials offered, without their value.
func (cfg ConnectConfig) credentials() string {
	switch {
	case cfg.Creds != "":
		return "creds file " + cfg.Creds
	case cfg.NKey != "":
		return "NKey seed file " + cfg.NKey
	case redact.URL(cfg.URL) != cfg.URL:
		return "user or token in the URL"
	}
	return "no credentials given"
}

// scrub removes from text every credential of the URLs in rawURLs (their
// userinfo as written and its password or token, escaped or not).
func scrub(text, rawURLs string) string {
	for s := range strings.SplitSeq(rawURLs, ",") {
		_, rest, ok := strings.Cut(strings.TrimSpace(s), "://")
		if !ok {
			rest = strings.TrimSpace(s) // nats.go reads it as nats://…
		}
		at := strings.LastIndexByte(rest, '@')
		if at < 0 {
			continue
		}
		userinfo := rest[:at]
		secrets := []string{userinfo}
		if _, pw, ok := strings.Cut(userinfo, ":"); ok {
			secrets = append(secrets, pw)
		}
		for _, sec := range secrets {
			if unesc, err := url.PathUnescape(sec); err == nil && unesc != "" {
				text = strings.ReplaceAll(text, unesc, redact.Mask)
			}
			if sec != "" {
				text = strings.ReplaceAll(text, sec, redact.Mask)
			}
		}
	}
	return text
}
