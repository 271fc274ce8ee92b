package tenant_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/tenant"
)

// kvReplicas is a KV bucket's replicas, from the status of its stream.
func kvReplicas(t *testing.T, js jetstream.JetStream, bucket string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	require.NoError(t, err, bucket)
	st, err := kv.Status(ctx)
	require.NoError(t, err, bucket)
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas
}

// On a 3-node cluster the registry and tokens buckets are made at R3, or
// raised to it when NewRegistry made them at 1; 0 changes nothing.
func TestEnsureBucketsReplicas(t *testing.T) {
	t.Parallel()
	c := testsvc.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()

	reg, err := tenant.NewRegistry(ctx, js)
	require.NoError(t, err)
	require.NoError(t, reg.Put(ctx, tenant.Tenant{Name: "acme"}))
	assert.Equal(t, 1, kvReplicas(t, js, tenant.RegistryBucket))

	require.NoError(t, tenant.EnsureBuckets(ctx, js, 0))
	assert.Equal(t, 1, kvReplicas(t, js, tenant.RegistryBucket), "0 leaves the bucket alone")

	require.NoError(t, tenant.EnsureBuckets(ctx, js, 3))
	assert.Equal(t, 3, kvReplicas(t, js, tenant.RegistryBucket), "raised")
	assert.Equal(t, 3, kvReplicas(t, js, tenant.TokensBucket), "created at 3")
	got, err := reg.Get(ctx, "acme")
	require.NoError(t, err, "the record survived the raise")
	assert.Equal(t, "acme", got.Name)

	require.NoError(t, tenant.EnsureBuckets(ctx, js, 3), "idempotent")
	// Every peer caught up before the servers stop: a server shut down
	// while it is still creating a stream's replica leaves that store's
	// goroutines behind (goleak sees them).
	for _, b := range []string{tenant.RegistryBucket, tenant.TokensBucket} {
		testsvc.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
			st, err := js.Stream(ctx, "KV_"+b)
			if err != nil {
				return false
			}
			cl := st.CachedInfo().Cluster
			if cl == nil || len(cl.Replicas) != 2 {
				return false
			}
			for _, r := range cl.Replicas {
				if !r.Current {
					return false
				}
			}
			return true
		}, "%s placed on 3 current peers", b)
	}
}
