package tenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/tenant"
)

// registries returns the registry as admin (who creates the bucket) and as
// the scheduler (who binds it), on one operator-mode server.
func registries(t *testing.T) (admin, sched *tenant.Registry, adminJS jetstream.JetStream) {
	t.Helper()
	s := newSetup(t)
	_, adminJS = s.admin(t)
	ctx := context.Background()
	admin, err := tenant.NewRegistry(ctx, adminJS)
	require.NoError(t, err)
	path, _ := s.issue(t, tenant.RoleScheduler, "")
	sjs, err := jetstream.New(mustDial(t, s.url, path).Conn)
	require.NoError(t, err)
	sched, err = tenant.NewRegistry(ctx, sjs)
	require.NoError(t, err, "the scheduler binds the existing bucket")
	return admin, sched, adminJS
}

func TestRegistryCRUD(t *testing.T) {
	t.Parallel()
	reg, sched, js := registries(t)
	ctx := context.Background()

	kv, err := js.KeyValue(ctx, tenant.RegistryBucket)
	require.NoError(t, err)
	st, err := kv.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.History())
	assert.Equal(t, jetstream.FileStorage, st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Storage)

	list, err := sched.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, list)
	_, err = sched.Get(ctx, "dev")
	assert.ErrorIs(t, err, tenant.ErrNotFound)

	require.NoError(t, reg.Create(ctx, tenant.Tenant{Name: "dev", MaxQueued: 10}))
	assert.ErrorIs(t, reg.Create(ctx, tenant.Tenant{Name: "dev"}), tenant.ErrExists)
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "ci", Rate: 5, CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}))
	assert.ErrorIs(t, reg.Put(ctx, tenant.Tenant{Name: "Bad"}), tenant.ErrInvalid)
	assert.ErrorIs(t, reg.Put(ctx, tenant.Tenant{Name: "dev", MaxRunning: -1}), tenant.ErrInvalid)

	dev, err := sched.Get(ctx, "dev")
	require.NoError(t, err)
	assert.Equal(t, int64(10), dev.MaxQueued)
	assert.WithinDuration(t, time.Now(), dev.CreatedAt, time.Minute, "a zero CreatedAt is set")

	dev.MaxRunning = 3
	require.NoError(t, reg.Put(ctx, dev))
	list, err = sched.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "ci", list[0].Name, "by name")
	assert.Equal(t, 5, list[0].Rate)
	assert.Equal(t, 3, list[1].MaxRunning)
	assert.True(t, dev.CreatedAt.Equal(list[1].CreatedAt))

	require.NoError(t, reg.Delete(ctx, "ci"))
	assert.ErrorIs(t, reg.Delete(ctx, "ci"), tenant.ErrNotFound)
	_, err = reg.Get(ctx, "ci")
	assert.ErrorIs(t, err, tenant.ErrNotFound)
	list, err = reg.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "dev", list[0].Name)

	_, err = reg.Get(ctx, "a.>")
	assert.ErrorIs(t, err, tenant.ErrInvalid, "a name that is no KV key is refused before NATS")

	// A record that does not decode makes List fail, naming it.
	_, err = kv.Put(ctx, "broken", []byte("{"))
	require.NoError(t, err)
	_, err = reg.List(ctx)
	require.ErrorIs(t, err, tenant.ErrInvalid)
	assert.Contains(t, err.Error(), `"broken"`)
}

func next(t *testing.T, events <-chan tenant.Event) tenant.Event {
	t.Helper()
	select {
	case ev, ok := <-events:
		require.True(t, ok, "the watch ended early")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return tenant.Event{}
	}
}

func TestRegistryWatch(t *testing.T) {
	t.Parallel()
	reg, sched, js := registries(t)
	ctx := context.Background()
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "alpha"}))
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "beta", MaxRunning: 1}))
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "beta", MaxRunning: 2}))

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := sched.Watch(wctx)
	require.NoError(t, err)
	seen := map[string]tenant.Tenant{}
	for range 2 {
		ev := next(t, events)
		require.Equal(t, tenant.EventPut, ev.Op, ev.Op.String())
		require.NoError(t, ev.Err)
		seen[ev.Name] = ev.Tenant
	}
	assert.Equal(t, tenant.EventSynced, next(t, events).Op)
	assert.Len(t, seen, 2)
	assert.Equal(t, 2, seen["beta"].MaxRunning, "the current record only")

	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "gamma", Rate: 7}))
	ev := next(t, events)
	assert.Equal(t, tenant.EventPut, ev.Op)
	assert.Equal(t, "gamma", ev.Name)
	assert.Equal(t, 7, ev.Tenant.Rate)
	assert.NotZero(t, ev.Revision)

	require.NoError(t, reg.Delete(ctx, "alpha"))
	ev = next(t, events)
	assert.Equal(t, tenant.EventDelete, ev.Op, ev.Op.String())
	assert.Equal(t, "alpha", ev.Name)

	kv, err := js.KeyValue(ctx, tenant.RegistryBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "broken", []byte(`{"name":"other"}`))
	require.NoError(t, err)
	ev = next(t, events)
	assert.Equal(t, "broken", ev.Name)
	assert.ErrorIs(t, ev.Err, tenant.ErrInvalid)

	cancel()
	select {
	case _, ok := <-events:
		for ok {
			_, ok = <-events
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel was not closed after cancel")
	}
}

func TestRegistryWatchStartsAndStopsRepeatedly(t *testing.T) {
	t.Parallel()
	_, sched, _ := registries(t)
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		events, err := sched.Watch(ctx)
		require.NoError(t, err)
		assert.Equal(t, tenant.EventSynced, next(t, events).Op, "an empty registry is synced at once")
		cancel()
		for range events {
		}
	}
}

func TestTenantsCannotReadTheRegistry(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, adminJS := s.admin(t)
	_, err := tenant.NewRegistry(context.Background(), adminJS)
	require.NoError(t, err)
	alpha, _ := s.tenantConn(t, "alpha")
	js, err := jetstream.New(alpha.Conn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = tenant.NewRegistry(ctx, js)
	assert.Error(t, err)
	alpha.waitErr(t, `Publish to "$JS.API.STREAM.INFO.KV_PADDOCK_TENANTS"`)
}

func TestRegistryWatchFunc(t *testing.T) {
	t.Parallel()
	reg, sched, _ := registries(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "alpha", MaxRunning: 2}))
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "beta"}))

	got := make(chan tenant.Event, 16)
	require.NoError(t, sched.WatchFunc(ctx, func(ev tenant.Event) { got <- ev }))
	// fn ran for every current tenant before WatchFunc returned.
	require.Len(t, got, 2)
	initial := []string{(<-got).Name, (<-got).Name}
	assert.ElementsMatch(t, []string{"alpha", "beta"}, initial)

	require.NoError(t, reg.Delete(ctx, "beta"))
	ev := next(t, got)
	assert.Equal(t, tenant.EventDelete, ev.Op)
	assert.Equal(t, "beta", ev.Name)

	cancelled, stop := context.WithCancel(context.Background())
	stop()
	assert.Error(t, sched.WatchFunc(cancelled, func(tenant.Event) {}))
}
