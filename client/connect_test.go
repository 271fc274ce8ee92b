package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/redact"
	"github.com/paddockhq/paddock/job"
)

// startServer starts an embedded NATS server (no JetStream) with opts'
// authentication and TLS settings on a random loopback port.
func startServer(t *testing.T, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(&opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

func connectCfg(url string) client.ConnectConfig {
	return client.ConnectConfig{URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

func TestConnectRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	seed := writeFile(t, "not-a-seed", []byte("hello"))
	for name, cfg := range map[string]client.ConnectConfig{
		"creds and nkey":      {Creds: "a.creds", NKey: "a.nk"},
		"cert without key":    {TLSCert: "c.pem"},
		"key without cert":    {TLSKey: "k.pem"},
		"bad tenant":          {Tenant: "No_Such"},
		"unreadable nkey":     {NKey: filepath.Join(t.TempDir(), "missing.nk")},
		"not a seed":          {NKey: seed},
		"malformed url":       {URL: "nats://host:port:bad"},
		"malformed with auth": {URL: "nats://alice:s3cret-pw@host:99999999999999999999x"},
	} {
		_, err := client.Connect(context.Background(), cfg)
		require.ErrorIs(t, err, client.ErrConfig, name)
		assert.NotContains(t, err.Error(), "s3cret-pw", name)
	}
}

// Connect applies the reconnect policy and the tenant's inbox prefix; a
// user and password in the URL authenticate; a refused password is named,
// never shown.
func TestConnectUserPassword(t *testing.T) {
	t.Parallel()
	srv := startServer(t, server.Options{Users: []*server.User{{Username: "alice", Password: "right-pw"}}})
	url := func(pw string) string {
		return strings.Replace(srv.ClientURL(), "nats://", "nats://alice:"+pw+"@", 1)
	}
	cfg := connectCfg(url("right-pw"))
	cfg.Tenant, cfg.Name = "acme", "pipeline-7"
	nc, err := client.Connect(context.Background(), cfg)
	require.NoError(t, err)
	defer nc.Close()
	assert.Equal(t, job.InboxPrefix("acme"), nc.Opts.InboxPrefix)
	assert.True(t, strings.HasPrefix(nc.NewInbox(), job.InboxPrefix("acme")+"."))
	assert.Equal(t, -1, nc.Opts.MaxReconnect, "reconnects without limit")
	assert.Equal(t, 500*time.Millisecond, nc.Opts.ReconnectWait)
	assert.Equal(t, "pipeline-7", nc.Opts.Name)

	nc, err = client.Connect(context.Background(), connectCfg(url("right-pw")))
	require.NoError(t, err, "no tenant: the default inbox prefix")
	assert.Empty(t, nc.Opts.InboxPrefix)
	nc.Close()

	_, err = client.Connect(context.Background(), connectCfg(srv.ClientURL()))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	assert.Contains(t, err.Error(), "refused the credentials (no credentials given")

	_, err = client.Connect(context.Background(), connectCfg(url("wrong-pw-123")))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	assert.Contains(t, err.Error(), "NATS at "+redact.URL(url("wrong-pw-123"))+" refused the credentials (user or token in the URL")
	assert.Contains(t, err.Error(), "check --creds / NATS_CREDS")
	assert.NotContains(t, err.Error(), "wrong-pw-123")
}

func TestConnectTokenNeverShown(t *testing.T) {
	t.Parallel()
	srv := startServer(t, server.Options{Authorization: "good-token"})
	u := strings.Replace(srv.ClientURL(), "nats://", "nats://bad-token-xyz@", 1)
	_, err := client.Connect(context.Background(), connectCfg(u))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	assert.Contains(t, err.Error(), "refused the credentials (user or token in the URL")
	assert.NotContains(t, err.Error(), "bad-token-xyz")
}

func TestConnectNKey(t *testing.T) {
	t.Parallel()
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := user.PublicKey()
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	srv := startServer(t, server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})

	cfg := connectCfg(srv.ClientURL())
	cfg.NKey = writeFile(t, "user.nk", seed)
	nc, err := client.Connect(context.Background(), cfg)
	require.NoError(t, err)
	nc.Close()

	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherSeed, err := other.Seed()
	require.NoError(t, err)
	cfg.NKey = writeFile(t, "other.nk", otherSeed)
	_, err = client.Connect(context.Background(), cfg)
	require.ErrorIs(t, err, nats.ErrAuthorization)
	assert.Contains(t, err.Error(), "refused the credentials (NKey seed file "+cfg.NKey)
	assert.NotContains(t, err.Error(), string(otherSeed))
}

// A .creds file (user JWT and seed) against a server in operator mode.
func TestConnectCreds(t *testing.T) {
	t.Parallel()
	operator, account := newKey(t, nkeys.CreateOperator), newKey(t, nkeys.CreateAccount)
	oc := jwt.NewOperatorClaims(publicKey(t, operator))
	ojwt, err := oc.Encode(operator)
	require.NoError(t, err)
	oclaims, err := jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)
	apub := publicKey(t, account)
	ajwt, err := jwt.NewAccountClaims(apub).Encode(operator)
	require.NoError(t, err)
	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(apub, ajwt))
	srv := startServer(t, server.Options{TrustedOperators: []*jwt.OperatorClaims{oclaims}, AccountResolver: resolver})

	creds := func(signer nkeys.KeyPair) string {
		user := newKey(t, nkeys.CreateUser)
		uc := jwt.NewUserClaims(publicKey(t, user))
		uc.Pub.Allow.Add(job.SubmitSubject("acme"))
		uc.Sub.Allow.Add(job.InboxPrefix("acme") + ".>")
		ujwt, err := uc.Encode(signer)
		require.NoError(t, err)
		seed, err := user.Seed()
		require.NoError(t, err)
		data, err := jwt.FormatUserConfig(ujwt, seed)
		require.NoError(t, err)
		return writeFile(t, "user.creds", data)
	}
	cfg := connectCfg(srv.ClientURL())
	cfg.Creds, cfg.Tenant = creds(account), "acme"
	nc, err := client.Connect(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(job.SubmitSubject("acme"), nil))
	require.NoError(t, nc.Flush())
	nc.Close()

	cfg.Creds = creds(newKey(t, nkeys.CreateAccount)) // signed by an account the operator never made
	_, err = client.Connect(context.Background(), cfg)
	require.ErrorIs(t, err, nats.ErrAuthorization)
	assert.Contains(t, err.Error(), "refused the credentials (creds file "+cfg.Creds)
	assert.Contains(t, err.Error(), "check --creds / NATS_CREDS")
	data, rerr := os.ReadFile(cfg.Creds)
	require.NoError(t, rerr)
	for line := range strings.SplitSeq(string(data), "\n") {
		if len(line) > 20 && !strings.HasPrefix(line, "-") {
			assert.NotContains(t, err.Error(), line, "no part of the creds file is shown")
		}
	}
}

func newKey(t *testing.T, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	require.NoError(t, err)
	return kp
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return pub
}

// TLS with a private CA and a client certificate the server verifies.
func TestConnectTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, dir, "ca", nil, nil)
	newCert(t, dir, "server", ca, caKey)
	newCert(t, dir, "client", ca, caKey)
	tlsCfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: filepath.Join(dir, "server.pem"),
		KeyFile: filepath.Join(dir, "server-key.pem"), CaFile: filepath.Join(dir, "ca.pem"), Verify: true})
	require.NoError(t, err)
	srv := startServer(t, server.Options{TLS: true, TLSVerify: true, TLSConfig: tlsCfg})

	cfg := connectCfg(srv.ClientURL())
	cfg.TLSCA = filepath.Join(dir, "ca.pem")
	cfg.TLSCert, cfg.TLSKey = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	nc, err := client.Connect(context.Background(), cfg)
	require.NoError(t, err)
	assert.True(t, nc.TLSRequired())
	nc.Close()

	cfg.TLSCert, cfg.TLSKey = "", ""
	_, err = client.Connect(context.Background(), cfg)
	require.Error(t, err, "the server requires a client certificate")
	assert.Contains(t, err.Error(), "connect to NATS at "+srv.ClientURL())
}

// newCert writes name.pem and name-key.pem under dir: a CA when parent is
// nil, else a certificate for 127.0.0.1 signed by parent.
func newCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func TestConnectFailures(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = client.Connect(context.Background(), connectCfg("nats://bob:pw-xyz@"+addr))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connect to NATS at nats://bob:xxxxx@"+addr)
	assert.Contains(t, err.Error(), "start one with `paddock up`")
	assert.NotContains(t, err.Error(), "pw-xyz")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = client.Connect(ctx, connectCfg("nats://"+addr))
	require.ErrorIs(t, err, context.Canceled)
}
