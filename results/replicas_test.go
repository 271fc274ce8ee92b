package results_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// tenantStores are the streams behind every store EnsureTenant makes.
func tenantStores(tenant string) []string {
	return []string{job.JobsStream(tenant), job.ResultsStream(tenant), job.OutputStream(tenant),
		"OBJ_" + job.OutBucket(tenant), "OBJ_" + job.InBucket(tenant)}
}

// replicasOf reads each stream's replicas from its StreamInfo: the
// configured count and the peers the cluster placed it on.
func replicasOf(t *testing.T, js jetstream.JetStream, names []string) map[string][2]int {
	t.Helper()
	out := map[string][2]int{}
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := js.Stream(ctx, name)
		cancel()
		require.NoError(t, err, name)
		info := st.CachedInfo()
		peers := 0
		if info.Cluster != nil {
			peers = 1 + len(info.Cluster.Replicas) // the leader and its replicas
		}
		out[name] = [2]int{info.Config.Replicas, peers}
	}
	return out
}

// On a 3-node cluster: streams and buckets made at R3 are placed on three
// servers; a fleet made at R1 is raised to R3 by the next start with
// Replicas 3 (the reconcile path every process runs); a start without
// Replicas (0) leaves R3 alone.
func TestEnsureTenantReplicas(t *testing.T) {
	t.Parallel()
	c := testsvc.StartNATSCluster(t, 3)
	nc, err := nats.Connect(c.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	require.NoError(t, results.EnsureTenant(ctx, js, results.StreamConfig{Replicas: 3}, "acme", 0, 0))
	for name, r := range replicasOf(t, js, tenantStores("acme")) {
		assert.Equal(t, [2]int{3, 3}, r, "%s: configured and placed replicas", name)
	}

	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	for name, r := range replicasOf(t, js, tenantStores(job.DefaultTenant)) {
		assert.Equal(t, [2]int{1, 1}, r, "%s: a new stream without Replicas", name)
	}
	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{Replicas: 3}))
	for name, r := range replicasOf(t, js, tenantStores(job.DefaultTenant)) {
		assert.Equal(t, 3, r[0], "%s raised to R3", name)
	}
	testsvc.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		for _, r := range replicasOf(t, js, tenantStores(job.DefaultTenant)) {
			if r[1] != 3 {
				return false
			}
		}
		return true
	}, "the raised streams placed on 3 servers")

	require.NoError(t, results.EnsureStreams(ctx, js, results.StreamConfig{}))
	for name, r := range replicasOf(t, js, tenantStores(job.DefaultTenant)) {
		assert.Equal(t, 3, r[0], "%s: a start without Replicas keeps R3", name)
	}
}
