package gateway_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/internal/testsvc"
)

// The sessions bucket is made at R3 on a 3-node cluster, and a bucket an
// older gateway made at 1 is raised; NewKVSessions binds it as it is.
func TestSessionBucketReplicas(t *testing.T) {
	t.Parallel()
	c := testsvc.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	replicas := func() int {
		st, err := js.Stream(ctx, "KV_"+gateway.SessionBucket)
		require.NoError(t, err)
		return st.CachedInfo().Config.Replicas
	}

	_, err = gateway.NewKVSessions(ctx, js)
	require.NoError(t, err)
	assert.Equal(t, 1, replicas())
	require.NoError(t, gateway.EnsureSessionBucket(ctx, js, 3))
	assert.Equal(t, 3, replicas(), "raised")
	_, err = gateway.NewKVSessions(ctx, js)
	require.NoError(t, err)
	assert.Equal(t, 3, replicas(), "binding keeps it")
	require.NoError(t, js.DeleteKeyValue(ctx, gateway.SessionBucket))
	require.NoError(t, gateway.EnsureSessionBucket(ctx, js, 3))
	assert.Equal(t, 3, replicas(), "created at 3")
}
