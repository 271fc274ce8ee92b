package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

// Every session gets a valid volume name of its own: the two kinds never
// meet, whatever the names, and a name a volume cannot hold is hashed.
func TestSessionVolume(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		kind SessionKind
		name string
		want string
	}{
		{SessionHTTP, "build-1", "sess-h-build-1"},
		{SessionMCP, "ABCDEFGHJKMNPQRSTVWXYZ2345", "sess-m-ABCDEFGHJKMNPQRSTVWXYZ2345"},
		{SessionHTTP, strings.Repeat("a", 57), "sess-h-" + strings.Repeat("a", 57)},
		{SessionHTTP, long, ""},           // too long: hashed
		{SessionHTTP, "a..b", ""},         // "..": hashed
		{SessionMCP, "id/with/slash", ""}, // not a volume character: hashed
		{SessionMCP, "trailing-", ""},     // must end alphanumeric (a KV key cannot end with '.')
	} {
		vol, err := SessionVolume(tc.kind, tc.name)
		require.NoError(t, err, tc.name)
		if tc.want != "" {
			assert.Equal(t, tc.want, vol)
		} else {
			assert.Regexp(t, `^sess-[hm]x-[0-9a-f]{40}$`, vol, tc.name)
		}
		spec := job.Spec{Command: "true", Volume: &job.Volume{Name: vol, Mode: job.VolumeRW}}
		_, err = job.Validate(&spec, job.Caps{Volumes: true})
		assert.NoError(t, err, "%q is a valid volume name", vol)
	}
	seen := map[string]string{}
	for _, kind := range []SessionKind{SessionHTTP, SessionMCP} {
		for _, name := range []string{"x", "x-1", long, "h-x", "x" + long} {
			vol, err := SessionVolume(kind, name)
			require.NoError(t, err)
			who := string(kind) + ":" + name
			assert.NotContains(t, seen, vol, "%s and %s share a volume", who, seen[vol])
			seen[vol] = who
		}
	}
	_, err := SessionVolume(SessionHTTP, "")
	assert.ErrorIs(t, err, ErrSessionName)
	_, err = SessionVolume("ftp", "x")
	assert.ErrorIs(t, err, ErrSessionName)
}

// storeCase is a SessionStore under test with a way to read its raw
// record (nil for the memory store).
type storeCase struct {
	name  string
	store SessionStore
	raw   func(key string) []byte
	// last is the headers of the key's last message (the kv store).
	last func(key string) nats.Header
}

func stores(t *testing.T) []storeCase {
	ns := testsvc.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kvs, err := NewKVSessions(context.Background(), js)
	require.NoError(t, err)
	again, err := NewKVSessions(context.Background(), js)
	require.NoError(t, err, "binding an existing bucket")
	_ = again
	kv, err := js.KeyValue(context.Background(), SessionBucket)
	require.NoError(t, err)
	raw := func(key string) []byte {
		e, err := kv.Get(context.Background(), key)
		require.NoError(t, err)
		return e.Value()
	}
	last := func(key string) nats.Header {
		st, err := js.Stream(context.Background(), "KV_"+SessionBucket)
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(context.Background(), "$KV."+SessionBucket+"."+key)
		require.NoError(t, err)
		return m.Header
	}
	return []storeCase{{"kv", kvs, raw, last}, {"mem", NewMemSessions(), nil, nil}}
}

// The SessionStore contract, for both stores: Touch creates and refreshes,
// every other change is checked against the revision it was based on.
func TestSessionStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sc := range stores(t) {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.store
			ref := SessionRef{Tenant: "dev", Kind: SessionHTTP, Name: "work"}
			_, err := st.Get(ctx, ref)
			require.ErrorIs(t, err, ErrNoSession)

			s1, err := st.Touch(ctx, ref, t0)
			require.NoError(t, err)
			assert.Equal(t, Session{Tenant: "dev", Name: "work", Kind: SessionHTTP, Volume: "sess-h-work",
				CreatedAt: t0, LastUsed: t0, Revision: s1.Revision, Created: true}, s1)
			s2, err := st.Touch(ctx, ref, t0.Add(time.Minute))
			require.NoError(t, err)
			assert.False(t, s2.Created, "a refresh creates nothing")
			assert.Equal(t, t0, s2.CreatedAt)
			assert.Equal(t, t0.Add(time.Minute), s2.LastUsed)
			assert.Greater(t, s2.Revision, s1.Revision)
			got, err := st.Get(ctx, ref)
			require.NoError(t, err)
			assert.Equal(t, s2, got)
			if sc.raw != nil {
				var rec map[string]any
				require.NoError(t, json.Unmarshal(sc.raw("dev.sess-h-work"), &rec))
				assert.Equal(t, map[string]any{"tenant": "dev", "name": "work", "kind": "http", "volume": "sess-h-work",
					"created_at": "2025-01-02T03:04:05Z", "last_used": "2025-01-02T03:05:05Z"}, rec)
			}

			// Another tenant's session of the same name is another session.
			o, err := st.Touch(ctx, SessionRef{Tenant: "other", Kind: SessionHTTP, Name: "work"}, t0.Add(2*time.Hour))
			require.NoError(t, err)
			for tn, want := range map[string]int{"dev": 1, "other": 1, "nobody": 0} {
				n, err := st.Count(ctx, tn, SessionHTTP)
				require.NoError(t, err)
				assert.Equal(t, want, n, "named sessions of %s", tn)
			}
			n, err := st.Count(ctx, "dev", SessionMCP)
			require.NoError(t, err)
			assert.Zero(t, n, "an MCP session is not a named one")
			idle, err := st.Idle(ctx, t0.Add(time.Hour))
			require.NoError(t, err)
			assert.Equal(t, []Session{s2}, idle, "only dev's is idle")

			_, err = st.Claim(ctx, s1, t0)
			require.ErrorIs(t, err, ErrSessionChanged, "a claim on a stale read")
			c, err := st.Claim(ctx, s2, t0.Add(3*time.Minute))
			require.NoError(t, err)
			assert.Equal(t, t0.Add(3*time.Minute), c.EndingAt)
			_, err = st.Touch(ctx, ref, t0.Add(4*time.Minute))
			require.ErrorIs(t, err, ErrSessionEnding, "a claimed session is not refreshed")
			idle, err = st.Idle(ctx, t0.Add(time.Hour))
			require.NoError(t, err)
			assert.Equal(t, []Session{c}, idle, "claimed sessions are listed, with their claim")

			require.ErrorIs(t, st.Remove(ctx, s2), ErrSessionChanged, "a remove on a stale read")
			require.NoError(t, st.Remove(ctx, c))
			if sc.last != nil {
				h := sc.last("dev.sess-h-work")
				assert.Equal(t, "PURGE", h.Get("KV-Operation"))
				assert.Equal(t, "1m0s", h.Get("Nats-TTL"), "the marker expires: ended sessions do not pile up")
			}
			require.NoError(t, st.Remove(ctx, c), "removing what is gone")
			_, err = st.Get(ctx, ref)
			require.ErrorIs(t, err, ErrNoSession)
			_, err = st.Claim(ctx, c, t0)
			assert.Error(t, err, "claiming what is gone")
			again, err := st.Touch(ctx, ref, t0.Add(5*time.Minute))
			require.NoError(t, err, "a name is free again once removed")
			assert.Equal(t, t0.Add(5*time.Minute), again.CreatedAt)
			require.NoError(t, st.Remove(ctx, again))
			require.NoError(t, st.Remove(ctx, o))
			n, err = st.Count(ctx, "dev", SessionHTTP)
			require.NoError(t, err)
			assert.Zero(t, n, "removed sessions are not counted")

			_, err = st.Touch(ctx, SessionRef{Tenant: "Bad", Kind: SessionHTTP, Name: "x"}, t0)
			assert.ErrorIs(t, err, ErrSessionName)
		})
	}
}

// The store works with exactly the NATS permissions of the gateway's
// service user (tenant.RoleGateway), bucket creation included, and the
// server reports no violation.
func TestKVSessionsGatewayGrant(t *testing.T) {
	t.Parallel()
	grant, err := tenant.GrantOf(tenant.RoleGateway, "")
	require.NoError(t, err)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true, Users: []*server.User{{Username: "gw", Password: "pw",
			Permissions: &server.Permissions{Publish: &server.SubjectPermission{Allow: grant.Pub},
				Subscribe: &server.SubjectPermission{Allow: grant.Sub}}}}})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	var mu sync.Mutex
	var violations []error
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("gw", "pw"), nats.CustomInboxPrefix(tenant.GatewayInboxPrefix),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err)
			mu.Unlock()
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := NewKVSessions(ctx, js)
	require.NoError(t, err, "create the bucket as the gateway")
	assert.Equal(t, markerTTL, st.markerTTL, "the server keeps marker TTLs")
	ref := SessionRef{Tenant: "dev", Kind: SessionMCP, Name: "grant"}
	_, err = st.Touch(ctx, ref, t0)
	require.NoError(t, err)
	s, err := st.Touch(ctx, ref, t0.Add(time.Second))
	require.NoError(t, err)
	idle, err := st.Idle(ctx, t0.Add(time.Hour))
	require.NoError(t, err)
	require.Len(t, idle, 1)
	c, err := st.Claim(ctx, s, t0)
	require.NoError(t, err)
	require.NoError(t, st.Remove(ctx, c))
	_, err = st.Get(ctx, ref)
	require.ErrorIs(t, err, ErrNoSession)
	_, err = NewKVSessions(ctx, js)
	require.NoError(t, err, "bind the existing bucket")
	require.NoError(t, nc.Flush())
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, violations)
}

// Of two gateways (two connections, two KVSessions) racing to claim the
// same sessions, exactly one wins each; and racing Touches all land.
func TestSessionClaimRace(t *testing.T) {
	t.Parallel()
	ns := testsvc.StartNATS(t)
	ctx := context.Background()
	var gw [2]*KVSessions
	for i := range gw {
		nc, err := nats.Connect(ns.URL)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		gw[i], err = NewKVSessions(ctx, js)
		require.NoError(t, err)
	}
	const n = 50
	for i := range n {
		ref := SessionRef{Tenant: "dev", Kind: SessionMCP, Name: fmt.Sprintf("s%d", i)}
		// Both gateways touch it at once, then both claim what they read.
		var wg sync.WaitGroup
		var read [2]Session
		for g := range gw {
			wg.Go(func() {
				var err error
				read[g], err = gw[g].Touch(ctx, ref, t0)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		latest, err := gw[0].Get(ctx, ref)
		require.NoError(t, err)
		var won [2]error
		for g := range gw {
			wg.Go(func() { _, won[g] = gw[g].Claim(ctx, latest, t0) })
		}
		wg.Wait()
		wins := 0
		for _, err := range won {
			if err == nil {
				wins++
			} else {
				assert.ErrorIs(t, err, ErrSessionChanged)
			}
		}
		assert.Equal(t, 1, wins, "exactly one gateway claims %s", ref.Name)
	}
}

// Two gateways ending the same session at once run one delete job between
// them; the workspace is gone and so is the record.
func TestSessionEndRace(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	other, err := New(f.gw.cfg) // a second gateway on the same store and fleet
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev := Identity{Tenant: "dev", TokenID: "dev-id"}
	vol, err := f.gw.sessionVolume(ctx, dev, "race")
	require.NoError(t, err)
	writeFile(t, f, vol)
	dir := f.volumeDir("dev", vol.Name)

	ends := countJobs(t, f, LabelSessionEnd)
	var errs [2]error
	var wg sync.WaitGroup
	for i, g := range []*Gateway{f.gw, other} {
		wg.Go(func() { errs[i] = g.endSession(ctx, dev, "race") })
	}
	wg.Wait()
	oks := 0
	for _, err := range errs {
		if err == nil {
			oks++
			continue
		}
		assert.True(t, errorIsAny(err, ErrSessionEnding, ErrNoSession, ErrSessionChanged), "the loser is told: %v", err)
	}
	assert.Equal(t, 1, oks, "one gateway ended it: %v", errs)
	assert.Equal(t, 1, ends(), "one delete job")
	assert.NoFileExists(t, dir+"/f")
	_, err = f.gw.cfg.Sessions.Get(ctx, SessionRef{Tenant: "dev", Kind: SessionHTTP, Name: "race"})
	assert.ErrorIs(t, err, ErrNoSession)
	assert.ErrorIs(t, f.gw.endSession(ctx, dev, "race"), ErrNoSession)
}

func errorIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// countJobs counts, from now on, the results of dev's jobs carrying label.
// The returned func reports the count of those published so far: a flush
// brings every result the server sent before it into the subscription's
// queue, which is then drained.
func countJobs(t *testing.T, f *fleet, label string) func() int {
	t.Helper()
	sub, err := f.nc.SubscribeSync(job.ResultSubjects("dev"))
	require.NoError(t, err)
	require.NoError(t, f.nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	n := 0
	return func() int {
		require.NoError(t, f.nc.Flush())
		for {
			m, err := sub.NextMsg(100 * time.Millisecond)
			if err != nil {
				return n
			}
			var r job.Result
			if json.Unmarshal(m.Data, &r) == nil && r.Labels[label] != "" {
				n++
			}
		}
	}
}

// The sweeper ends the sessions idle longer than SessionIdleTTL (their
// workspace, then their record) and leaves the others; Start and Stop are
// idempotent and may repeat.
func TestSweeperEndsIdleSessions(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	g := f.gw
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g.sess.every = 200 * time.Millisecond
	for range 3 {
		require.NoError(t, g.Start(ctx))
		require.NoError(t, g.Start(ctx), "Start is idempotent")
		g.Stop()
		g.Stop()
	}
	dev := Identity{Tenant: "dev", TokenID: "dev-id"}
	write := func(name string) string {
		vol, err := g.sessionVolume(ctx, dev, name)
		require.NoError(t, err)
		writeFile(t, f, vol)
		return f.volumeDir("dev", vol.Name) + "/f"
	}
	old := write("old")
	// 31 minutes later (the default TTL is 30): "fresh" is used then.
	g.sess.skew.Store(int64(31 * time.Minute))
	fresh := write("fresh")

	require.NoError(t, g.Start(ctx))
	t.Cleanup(g.Stop)
	require.Eventually(t, func() bool {
		_, err := g.cfg.Sessions.Get(ctx, SessionRef{Tenant: "dev", Kind: SessionHTTP, Name: "old"})
		return errors.Is(err, ErrNoSession)
	}, 2*time.Minute, 100*time.Millisecond, "the idle session's record is removed")
	assert.NoFileExists(t, old, "its workspace is deleted")
	g.Stop()
	assert.FileExists(t, fresh, "the session in use is left")
	s, err := g.cfg.Sessions.Get(ctx, SessionRef{Tenant: "dev", Kind: SessionHTTP, Name: "fresh"})
	require.NoError(t, err)
	assert.True(t, s.EndingAt.IsZero())
}

// A sweep that cannot delete a workspace keeps the record, claimed, and a
// later sweep, once the claim is stale, ends it.
func TestSweeperRetriesFailedEnd(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	g := f.gw
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := SessionRef{Tenant: "dev", Kind: SessionHTTP, Name: "stuck"}
	vol, err := g.sessionVolume(ctx, Identity{Tenant: "dev"}, "stuck")
	require.NoError(t, err)
	writeFile(t, f, vol)
	dir := f.volumeDir("dev", vol.Name)

	// A gateway that cannot reach the fleet: its dials fail.
	unreachable := NewPool(func(ctx context.Context, _ string) (*nats.Conn, error) {
		return nats.Connect("nats://127.0.0.1:1", nats.NoReconnect())
	}, client.Config{})
	t.Cleanup(unreachable.Close)
	bad, err := New(Config{Auth: g.cfg.Auth, Clients: unreachable, Sessions: g.cfg.Sessions})
	require.NoError(t, err)
	bad.sess.skew.Store(int64(31 * time.Minute))
	bad.sweep(ctx)
	s, err := g.cfg.Sessions.Get(ctx, ref)
	require.NoError(t, err, "the record stays")
	assert.False(t, s.EndingAt.IsZero(), "claimed")
	assert.FileExists(t, dir+"/f")

	g.sess.skew.Store(int64(31 * time.Minute))
	g.sweep(ctx)
	_, err = g.cfg.Sessions.Get(ctx, ref)
	require.NoError(t, err, "a fresh claim is left to its owner")

	g.sess.skew.Store(int64(31*time.Minute + g.claimTTL()))
	g.sweep(ctx)
	_, err = g.cfg.Sessions.Get(ctx, ref)
	require.ErrorIs(t, err, ErrNoSession, "a stale claim is taken over")
	assert.NoFileExists(t, dir+"/f")
}

// writeFile writes /workspace/f in vol with a job of dev.
func writeFile(t *testing.T, f *fleet, vol *job.Volume) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := f.client("dev")
	sub, err := c.Submit(ctx, job.Spec{Command: "echo x > /workspace/f", Volume: vol})
	require.NoError(t, err)
	r, err := c.Wait(ctx, sub.ID)
	require.NoError(t, err)
	require.Equal(t, job.ReasonOK, r.Reason, r.Error)
	require.FileExists(t, f.volumeDir("dev", vol.Name)+"/f")
}
