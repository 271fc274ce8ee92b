package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

var initPath string

func TestMain(m *testing.M) { testsvc.InitMain(m, &initPath) }

// The tokens of a fleet's tenants.
const (
	devToken   = "dev-token"
	otherToken = "other-token"
)

// fleet is a whole Paddock fleet behind a gateway, in one test: embedded
// NATS (no authentication: tenants are told apart by their subjects, as
// the tenants' own clients use them), a private redis-server, a
// scheduler, a worker on the real Docker engine with a volume root, and
// the Gateway served by httptest. Tenants dev and other; tokens devToken
// and otherToken.
type fleet struct {
	t          *testing.T
	URL        string
	gw         *Gateway
	srv        *httptest.Server
	nc         *nats.Conn
	js         jetstream.JetStream
	pool       *Pool
	volumeRoot string // the worker's volume root: <root>/<tenant>.<volume>
	owner      string // the worker's container owner label
}

// newFleet starts a fleet; mod, if not nil, changes the gateway's Config
// before New.
func newFleet(t *testing.T, mod func(*Config)) *fleet {
	t.Helper()
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	ns := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	ctx := context.Background()

	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	streams := results.StreamConfig{}
	require.NoError(t, results.EnsureStreams(ctx, js, streams))
	tenants := []string{"dev", "other"}
	var quotas scheduler.StaticTenants
	for _, tn := range tenants {
		require.NoError(t, results.EnsureTenant(ctx, js, streams, tn, 0, 0))
		quotas = append(quotas, scheduler.Quota{Tenant: tn})
	}
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	store := results.NewStore(rdb, js, results.StoreConfig{})

	root := t.TempDir()
	// Runs after the worker stopped: volumes are filesystems mounted there.
	t.Cleanup(func() { assert.NoError(t, worker.UnmountVolumes(root)) })
	leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{})
	require.NoError(t, err)
	guard, err := locks.NewGuard(leaser, locks.GuardConfig{Root: root, Wait: time.Minute})
	require.NoError(t, err)

	caps := job.Caps{Images: []string{testsvc.TestImage}, DefaultMemoryMB: 64, DefaultPids: 32, DefaultTmpfsMB: 16, Volumes: true}
	sch, err := scheduler.New(js, asynq.NewClientFromRedisClient(rdb), store, scheduler.Config{Caps: caps, Tenants: quotas})
	require.NoError(t, err)
	require.NoError(t, sch.Start(ctx))
	t.Cleanup(sch.Stop)
	canc, err := scheduler.NewCanceler(nc, asynq.NewInspectorFromRedisClient(rdb), store, scheduler.CancelerConfig{Queues: caps.WithDefaults().Queues})
	require.NoError(t, err)
	require.NoError(t, canc.Start(ctx))
	t.Cleanup(canc.Stop)
	lister, err := scheduler.NewLister(nc, store, scheduler.ListerConfig{})
	require.NoError(t, err)
	require.NoError(t, lister.Start(ctx))
	t.Cleanup(lister.Stop)

	owner := testsvc.Unique("gw")
	w, err := worker.Build(ctx, rdb, d, js, store, worker.Config{ID: owner, Caps: caps, Concurrency: 2,
		ShutdownTimeout: 5 * time.Second, Volumes: worker.LockGuard(guard), Sandbox: sandbox.Config{InitPath: initPath, PoolSize: 1}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	pool := NewPool(func(ctx context.Context, tenant string) (*nats.Conn, error) {
		return nats.Connect(ns.URL, nats.CustomInboxPrefix(job.InboxPrefix(tenant)))
	}, client.Config{})
	t.Cleanup(pool.Close)
	sessions, err := NewKVSessions(ctx, js)
	require.NoError(t, err)
	cfg := Config{Auth: staticTokens(map[string]string{devToken: "dev", otherToken: "other"}), Clients: pool, Sessions: sessions}
	if mod != nil {
		mod(&cfg)
	}
	gw, err := New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	return &fleet{t: t, URL: srv.URL, gw: gw, srv: srv, nc: nc, js: js, pool: pool, volumeRoot: root, owner: owner}
}

// staticTokens is an Authenticator over a fixed token → tenant map (the
// binary's is tenant.Tokens, tested in package tenant).
func staticTokens(m map[string]string) Authenticator {
	return AuthFunc(func(_ context.Context, bearer string) (Identity, error) {
		t, ok := m[bearer]
		if !ok {
			return Identity{}, fmt.Errorf("%w: unknown token", ErrUnauthorized)
		}
		return Identity{Tenant: t, TokenID: t + "-id"}, nil
	})
}

// client is tenant's own SDK client on the fleet (the gateway's pool).
func (f *fleet) client(tenant string) *client.Client {
	f.t.Helper()
	c, err := f.pool.Client(context.Background(), tenant)
	require.NoError(f.t, err)
	return c
}

// volumeDir is the directory of tenant's volume name on the worker's root.
func (f *fleet) volumeDir(tenant, name string) string {
	return filepath.Join(f.volumeRoot, tenant+"."+name)
}

// authed is an http.Client whose requests carry token.
func authed(token string) *http.Client {
	return &http.Client{Transport: bearer{token: token, rt: http.DefaultTransport}, Timeout: 5 * time.Minute}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
