package results_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// An object the worker writes is a plain Object Store object, and a
// second put of the same name replaces it and leaves no chunk behind.
func TestPutObjectIsReadableAndReplaces(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.StartNATS(t))
	ctx := context.Background()
	require.NoError(t, results.EnsureTenantStores(ctx, js, results.StoreQuota{}, "acme"))
	x, err := results.NewIO(js, results.IOConfig{})
	require.NoError(t, err)
	obs, err := js.ObjectStore(ctx, job.OutBucket("acme"))
	require.NoError(t, err)

	for _, size := range []int{3 << 20, 200 << 10, 0} {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		o, err := x.Put(ctx, "acme", "j1/stdout", bytes.NewReader(data))
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		assert.Equal(t, hex.EncodeToString(sum[:]), o.SHA256)
		assert.Equal(t, int64(size), o.Bytes)
		got, err := obs.GetBytes(ctx, "j1/stdout") // nats.go checks the digest too
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, got), "size %d", size)
	}
	st, err := js.Stream(ctx, "OBJ_"+job.OutBucket("acme"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "only the last (empty) object's meta is left")
}

// Live output under a tiny rate: the writer never blocks, every byte is
// either published or counted as skipped, chunks are numbered without a
// gap, and the end marker comes last.
func TestLiveCountsEveryByte(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.StartNATS(t))
	ctx := context.Background()
	require.NoError(t, results.EnsureTenantStores(ctx, js, results.StoreQuota{}, "acme"))
	x, err := results.NewIO(js, results.IOConfig{LiveRate: 8 << 10, LiveBuffer: 16 << 10})
	require.NoError(t, err)
	l := x.Live("acme", "j2", 1)
	const total = 2 << 20
	chunk := bytes.Repeat([]byte("z"), 32<<10)
	for n := 0; n < total; n += len(chunk) {
		l.Write(n/len(chunk)%2, chunk)
	}
	l.Close(job.ReasonOK)

	cons, err := js.OrderedConsumer(ctx, job.OutputStream("acme"), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{job.OutputSubject("acme", "j2")}})
	require.NoError(t, err)
	var sent, skipped int64
	for seq := 1; ; seq++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		h := m.Headers()
		assert.Equal(t, strconv.Itoa(seq), h.Get(job.HeaderOutSeq))
		if h.Get(job.HeaderOutEnd) != "" {
			assert.Equal(t, "ok", h.Get(job.HeaderOutEnd))
			break
		}
		sk, _ := strconv.ParseInt(h.Get(job.HeaderOutSkipped), 10, 64)
		sent, skipped = sent+int64(len(m.Data())), skipped+sk
	}
	assert.Equal(t, int64(total), sent+skipped)
	// A Write that waited for the publisher would have dropped nothing.
	assert.Greater(t, skipped, int64(total/2), "Write drops what the rate does not allow, it does not wait")
}

// Every live chunk holds the bytes printed at its place in its stream
// (the place is what was sent and skipped before it, and its own skip
// count), while a fast writer keeps refilling the pooled buffers the
// publisher is still sending from.
func TestLiveBytesStayInPlace(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.StartNATS(t))
	ctx := context.Background()
	require.NoError(t, results.EnsureTenantStores(ctx, js, results.StoreQuota{}, "acme"))
	x, err := results.NewIO(js, results.IOConfig{LiveRate: 512 << 10, LiveBuffer: 160 << 10})
	require.NoError(t, err)
	l := x.Live("acme", "j3", 1)
	const total = 4 << 20
	pattern := make([]byte, total+251)
	for i := range pattern {
		pattern[i] = byte(i % 251) // 251: no power of two lines up with a chunk
	}
	var off [2]int
	for i := 0; off[0] < total || off[1] < total; i++ {
		st := i % 2
		k := min(7000, total-off[st]) // pieces unaligned with any chunk
		l.Write(st, pattern[off[st]:off[st]+k])
		off[st] += k
		// sleep: paces the writer over the clock-based live rate limit, so buffers refill mid-send.
		time.Sleep(50 * time.Microsecond)
	}
	l.Close(job.ReasonOK)

	cons, err := js.OrderedConsumer(ctx, job.OutputStream("acme"), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{job.OutputSubject("acme", "j3")}})
	require.NoError(t, err)
	var at [2]int64
	msgs := 0
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		h := m.Headers()
		if h.Get(job.HeaderOutEnd) != "" {
			break
		}
		st := map[string]int{"stdout": 0, "stderr": 1}[h.Get(job.HeaderOutStream)]
		sk, _ := strconv.ParseInt(h.Get(job.HeaderOutSkipped), 10, 64)
		at[st] += sk
		d := m.Data()
		if !assert.Equal(t, pattern[at[st]:at[st]+int64(len(d))], d, "chunk %s of %s at %d: not the bytes printed there", h.Get(job.HeaderOutSeq), h.Get(job.HeaderOutStream), at[st]) {
			return
		}
		at[st] += int64(len(d))
		msgs++
	}
	assert.Equal(t, [2]int64{total, total}, at, "every byte sent or counted")
	assert.Greater(t, msgs, 8, "enough chunks for buffers to be reused")
}

// A tenant's own stored-bytes quota sizes its two buckets; 0 keeps the
// fleet's.
func TestEnsureTenantSizesBuckets(t *testing.T) {
	t.Parallel()
	js := connect(t, testsvc.StartNATS(t))
	ctx := context.Background()
	size := func(bucket string) int64 {
		st, err := js.Stream(ctx, "OBJ_"+bucket)
		require.NoError(t, err)
		return st.CachedInfo().Config.MaxBytes
	}
	cfg := results.StreamConfig{Stores: results.StoreQuota{StoredMaxBytes: 64 << 20}}
	require.NoError(t, results.EnsureTenant(ctx, js, cfg, "small", 0, 8<<20))
	assert.Equal(t, int64(8<<20), size(job.OutBucket("small")))
	assert.Equal(t, int64(8<<20), size(job.InBucket("small")))
	require.NoError(t, results.EnsureTenant(ctx, js, cfg, "small", 0, 0))
	assert.Equal(t, int64(64<<20), size(job.OutBucket("small")), "back to the fleet's size")

	// A full bucket: the object is refused, with ErrStreamFull.
	require.NoError(t, results.EnsureTenant(ctx, js, cfg, "small", 0, 1<<20))
	x, err := results.NewIO(js, results.IOConfig{})
	require.NoError(t, err)
	_, err = x.Put(ctx, "small", "big", bytes.NewReader(make([]byte, 2<<20)))
	require.ErrorIs(t, err, results.ErrStreamFull)
}
