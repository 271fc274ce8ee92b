package tenant_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/tenant"
)

// setup is an operator-mode NATS server (the real embedded server, with
// JetStream) trusting a fresh Authority.
type setup struct {
	auth *tenant.Authority
	srv  *server.Server
	url  string
	dir  string
}

// newSetup's authority has the accounts of tenants alpha and beta, which
// the server preloads; a test that issues another tenant's first user
// pushes its account (s.issue does).
func newSetup(t *testing.T) *setup {
	t.Helper()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	for _, name := range []string{"alpha", "beta"} {
		_, err := a.EnsureTenantAccount(name)
		require.NoError(t, err)
	}
	return startWith(t, a)
}

// startWith starts a server trusting a.
func startWith(t *testing.T, a *tenant.Authority) *setup {
	t.Helper()
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: filepath.Join(dir, "js"), NoLog: true, NoSigs: true}
	require.NoError(t, a.ConfigureServer(opts, filepath.Join(dir, "accounts")))
	return startServer(t, a, opts, dir)
}

func startServer(t *testing.T, a *tenant.Authority, opts *server.Options, dir string) *setup {
	t.Helper()
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return &setup{auth: a, srv: s, url: s.ClientURL(), dir: dir}
}

// issue writes the creds of a new user into a file and returns its path
// and public key.
func (s *setup) issue(t *testing.T, role tenant.Role, tenantName string) (string, string) {
	t.Helper()
	creds, pub, err := s.auth.IssueUser(role, tenantName, "")
	require.NoError(t, err)
	if role == tenant.RoleTenant {
		s.push(t) // a new tenant's account must reach the running server
	}
	return writeCreds(t, creds), pub
}

func writeCreds(t *testing.T, creds []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "user.creds")
	require.NoError(t, tenant.WriteCreds(path, creds))
	return path
}

// conn is a connection whose asynchronous errors arrive on errs.
type conn struct {
	*nats.Conn
	errs   chan error
	closed chan struct{}
}

// dial connects with the creds file (none when empty) and extra options.
func dial(t *testing.T, url, creds string, opts ...nats.Option) (*conn, error) {
	t.Helper()
	c := &conn{errs: make(chan error, 64), closed: make(chan struct{})}
	opts = append([]nats.Option{
		nats.NoReconnect(), nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
	}, opts...)
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	t.Cleanup(nc.Close)
	return c, nil
}

func mustDial(t *testing.T, url, creds string, opts ...nats.Option) *conn {
	t.Helper()
	c, err := dial(t, url, creds, opts...)
	require.NoError(t, err)
	return c
}

// tenantConn connects as a new user of tenant name, with its inbox prefix.
func (s *setup) tenantConn(t *testing.T, name string) (*conn, string) {
	t.Helper()
	path, pub := s.issue(t, tenant.RoleTenant, name)
	return mustDial(t, s.url, path, nats.CustomInboxPrefix("_INBOX."+name)), pub
}

func (s *setup) admin(t *testing.T) (*conn, jetstream.JetStream) {
	t.Helper()
	path, _ := s.issue(t, tenant.RoleAdmin, "")
	c := mustDial(t, s.url, path)
	js, err := jetstream.New(c.Conn)
	require.NoError(t, err)
	return c, js
}

// waitErr waits for an asynchronous error of c that contains want.
func (c *conn) waitErr(t *testing.T, want string) error {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if strings.Contains(err.Error(), want) {
				return err
			}
		case <-deadline:
			t.Fatalf("no asynchronous error containing %q", want)
			return nil
		}
	}
}

// requireAuthViolation asserts that err is the server's refusal of the
// credentials.
func requireAuthViolation(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.ErrorIs(t, err, nats.ErrAuthorization, msgAndArgs...)
	require.Contains(t, err.Error(), "Authorization Violation", msgAndArgs...)
}
