package broker_test

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
	"github.com/paddockhq/paddock/job"
)

// RootCAs lets a Go caller trust an upstream's private CA without making
// its own HTTPClient; it cannot be given with one.
func TestRootCAs(t *testing.T) {
	t.Parallel()
	pool := x509.NewCertPool()
	pool.AddCert(newUpstream(t).srv.Certificate()) // httptest's CA is the same for every test server
	s := newSetup(t, func(c *broker.Config) { c.HTTPClient, c.RootCAs = nil, pool })
	bx := s.serve(acmeJob())
	a := bx.do("GET", "http://svc/items", "")
	assert.Equal(t, http.StatusOK, a.Status, a.Body)
	assert.Len(t, s.up.seen(), 1)

	pol, err := broker.ParsePolicy([]byte(`{}`))
	require.NoError(t, err)
	_, err = broker.New(pol, s.secrets, broker.Config{HTTPClient: http.DefaultClient, RootCAs: pool})
	assert.ErrorIs(t, err, broker.ErrConfig)
}

// A fleet without a broker words a refused grant the one way (job).
func TestNoBrokerGrantMessage(t *testing.T) {
	t.Parallel()
	var nilPolicy *broker.Policy
	err := nilPolicy.Check("acme", []string{"svc"})
	var ge *broker.GrantError
	require.ErrorAs(t, err, &ge)
	assert.True(t, ge.Off)
	assert.Equal(t, "broker: "+job.NoBrokerGrant("svc"), err.Error())
}

func writePolicy(t *testing.T, path, grant string) {
	t.Helper()
	p := `{"grants": [{"name": "` + grant + `", "url": "https://example.com", "headers": {"Authorization": "Bearer ${secret:tok}"}}], "tenants": {"dev": ["` + grant + `"]}}`
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(p), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// A Holder follows its policy file on Reload; a file that fails to load
// keeps the policy in force, for the grant check and the serving broker.
func TestHolderReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	writePolicy(t, path, "first")
	logs := &syncBuffer{}
	h, err := broker.Load(path, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	require.NoError(t, h.Check("dev", []string{"first"}))
	assert.Error(t, h.Check("dev", []string{"second"}))
	assert.False(t, h.Serving())
	assert.Nil(t, h.Broker())

	secrets := t.TempDir()
	require.NoError(t, h.Serve(context.Background(), broker.ServeConfig{SecretsDir: secrets}))
	require.True(t, h.Serving())
	b := h.Broker()
	require.NoError(t, h.Serve(context.Background(), broker.ServeConfig{}), "a second Serve does nothing")
	assert.Same(t, b, h.Broker())
	assert.Contains(t, logs.String(), "secrets the broker policy names are missing", "tok is not in the directory")

	writePolicy(t, path, "second")
	writeSecret(t, secrets, "tok", "a-long-enough-secret\n")
	require.NoError(t, h.Reload(context.Background()))
	require.NoError(t, h.Check("dev", []string{"second"}))
	assert.Error(t, h.Check("dev", []string{"first"}), "the new policy replaced the old")
	assert.Same(t, h.Policy(), b.Policy(), "the serving broker has it too")
	require.NoError(t, b.CheckSecrets(context.Background()), "the secrets were read again")

	require.NoError(t, os.WriteFile(path, []byte(`{"grants": [`), 0o600))
	require.Error(t, h.Reload(context.Background()))
	assert.NoError(t, h.Check("dev", []string{"second"}), "a broken file keeps the policy in force")
	assert.Same(t, h.Policy(), b.Policy())

	_, err = broker.Load(filepath.Join(dir, "missing.json"), nil)
	assert.Error(t, err)
}

// ServeJob serves a job's grants and returns its calls as the result
// lists them.
func TestHolderServeJob(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(testPolicy, "UPSTREAM", up.srv.URL)), 0o600))
	secrets := t.TempDir()
	writeSecret(t, secrets, "svc-token", canary+"\n")
	h, err := broker.Load(path, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, h.Serve(context.Background(), broker.ServeConfig{SecretsDir: secrets, Broker: broker.Config{HTTPClient: up.srv.Client()}}))

	sock := filepath.Join(t.TempDir(), "b.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	type served struct {
		calls *job.BrokerCalls
		err   error
	}
	done := make(chan served, 1)
	go func() {
		c, err := h.ServeJob(ctx, ln, broker.JobInfo{Tenant: "acme", ID: "j", Grants: []string{"svc"}, Deadline: time.Now().Add(time.Hour)})
		done <- served{c, err}
	}()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	resp, err := (&http.Client{Transport: tr}).Get("http://svc/items")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	tr.CloseIdleConnections()
	cancel()
	r := <-done
	if r.err != nil && !errors.Is(r.err, context.Canceled) {
		require.NoError(t, r.err)
	}
	require.NotNil(t, r.calls)
	require.Len(t, r.calls.Calls, 1)
	assert.Equal(t, "svc", r.calls.Calls[0].Grant)
	assert.Equal(t, http.StatusOK, r.calls.Calls[0].Status)
	assert.Equal(t, "GET", r.calls.Calls[0].Method)
}
