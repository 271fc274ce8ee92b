package results_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/telemetry"
)

func TestRecordFirstWriterWins(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for round := range 20 {
		id := "race-" + string(rune('a'+round))
		contenders := []job.Reason{job.ReasonOK, job.ReasonExitNonzero, job.ReasonCanceled, job.ReasonInfra}
		stored := make([]job.Result, len(contenders))
		first := make([]bool, len(contenders))
		var wg sync.WaitGroup
		for i, reason := range contenders {
			wg.Go(func() {
				r := job.Result{ID: id, Error: "by contender " + string(reason)}
				r.Finish(reason)
				var err error
				stored[i], first[i], err = s.store.Record(ctx, r)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		winners := 0
		for i := range contenders {
			if first[i] {
				winners++
			}
			assert.Equal(t, stored[0], stored[i], "every caller gets the one stored result")
		}
		require.Equal(t, 1, winners, "exactly one Record call is first")
		got, err := s.store.Get(ctx, job.Key("", id))
		require.NoError(t, err)
		assert.Equal(t, stored[0], got)
		pub, err := s.client.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, stored[0], pub, "the published result is the stored one")
	}
}

func TestRecordCompletesResult(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := job.Result{ID: "complete-1", Reason: job.ReasonTimeout}
	stored, first, err := s.store.Record(context.Background(), r)
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, job.Version, stored.V)
	assert.Equal(t, job.StateFailed, stored.State)
	assert.False(t, stored.FinishedAt.IsZero())
}

func TestRecordRejectsInvalid(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for name, r := range map[string]job.Result{
		"empty id":         {Reason: job.ReasonOK},
		"id with space":    {ID: "a b", Reason: job.ReasonOK},
		"id too long":      {ID: strings.Repeat("x", 129), Reason: job.ReasonOK},
		"no reason":        {ID: "x1"},
		"unknown reason":   {ID: "x1", Reason: "exploded"},
		"state not reason": {ID: "x1", Reason: job.ReasonOK, State: job.StateFailed},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := s.store.Record(context.Background(), r)
			require.ErrorIs(t, err, results.ErrInvalid)
		})
	}
	_, err := s.store.Get(context.Background(), "x1")
	require.ErrorIs(t, err, results.ErrNotFound, "nothing was stored")
}

// A crash between the Redis write and the publish leaves a stored result
// nobody can read through NATS; the next Record (whoever calls it) repairs it.
func TestRecordRepairsLostPublish(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	orig := okResult("lost-1")
	orig.FinishedAt = time.Now().UTC().Truncate(time.Millisecond)
	data, err := json.Marshal(orig)
	require.NoError(t, err)
	require.NoError(t, s.rdb.Set(ctx, s.prefix+"result:"+job.Key("", "lost-1"), data, time.Hour).Err())

	_, err = s.client.Get(ctx, "lost-1")
	require.ErrorIs(t, err, client.ErrNotFinished)

	late := job.Result{ID: "lost-1"}
	late.Finish(job.ReasonInfra)
	stored, first, err := s.store.Record(ctx, late)
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, orig, stored, "the earlier result stays authoritative")

	got, err := s.client.Get(ctx, "lost-1")
	require.NoError(t, err)
	assert.Equal(t, orig, got)
}

// With NATS down the result is stored and the error says it was not
// published; calling Record again once NATS is back publishes it.
func TestRecordDuringNATSOutage(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	s.nats.Stop()
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	stored, first, err := s.store.Record(rctx, okResult("outage-1"))
	cancel()
	require.ErrorIs(t, err, results.ErrNotPublished)
	assert.True(t, first)
	assert.Equal(t, "outage-1", stored.ID)

	s.nats.Restart()
	require.Eventually(t, s.nc.IsConnected, 10*time.Second, 10*time.Millisecond)
	again, first, err := s.store.Record(ctx, okResult("outage-1"))
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, stored, again)
	got, err := s.client.Get(ctx, "outage-1")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
}

// rawCopies returns the result's bytes in Redis and its published message.
func (s *setup) rawCopies(t *testing.T, id string) ([]byte, *jetstream.RawStreamMsg) {
	t.Helper()
	ctx := context.Background()
	inRedis, err := s.rdb.Get(ctx, s.prefix+"result:"+job.Key("", id)).Bytes()
	require.NoError(t, err)
	st, err := s.js.Stream(ctx, job.ResultsStream(job.DefaultTenant))
	require.NoError(t, err)
	msg, err := st.GetLastMsgForSubject(ctx, job.ResultSubject("", id))
	require.NoError(t, err)
	return inRedis, msg
}

// An ordinary result is stored and published exactly as json.Marshal
// writes it: the bound changes nothing below it.
func TestRecordSmallResultIsUnchanged(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r := okResult("small-1")
	r.Stderr = job.Output{Text: "warning: <x> & \"y\"\n\x01\t", Bytes: 20}
	r.Attempts = []job.Attempt{{N: 1, Action: job.ActionInitial, Command: "echo hi", StderrTail: "tail"}}
	r.Labels = map[string]string{"team": "ci"}
	r.FinishedAt = time.Now().UTC().Truncate(time.Millisecond)
	want, err := json.Marshal(r)
	require.NoError(t, err)

	stored, first, err := s.store.Record(context.Background(), r)
	require.NoError(t, err)
	assert.True(t, first)
	assert.Equal(t, r, stored)
	inRedis, msg := s.rawCopies(t, "small-1")
	assert.Equal(t, string(want), string(inRedis), "byte-identical to json.Marshal")
	assert.Equal(t, string(want), string(msg.Data))
	assert.Empty(t, msg.Header.Get(results.HeaderTrimmed))
}

// floodText is n bytes cycling through every control byte and a few
// invalid UTF-8 sequences: the worst case of JSON escaping (6 bytes each).
func floodText(n int) string {
	unit := []byte{}
	for c := byte(0); c < 0x20; c++ {
		unit = append(unit, c)
	}
	unit = append(unit, 0x80, 0xff, 0xc3, '<', 0xed, 0xa0, 0x80)
	return strings.Repeat(string(unit), n/len(unit)+1)[:n]
}

// A job printing control bytes and invalid UTF-8 up to the largest output
// cap (16 MiB per stream: 8 MiB head + 8 MiB tail) leaves a result under the
// bound in Redis, and NATS carries the very same bytes.
func TestRecordFloodedResultIsBoundedInBothCopies(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	half := int(job.Caps{}.WithDefaults().MaxOutputBytes / 2)
	out := func() job.Output {
		return job.Output{Text: floodText(half), Tail: floodText(half), Bytes: 3 * int64(half), Truncated: true, OmittedBytes: int64(half)}
	}
	r := job.Result{ID: "flood-1", Stdout: out(), Stderr: out(), Worker: "w1",
		Attempts: []job.Attempt{{N: 1, Command: "cat /dev/urandom", StderrTail: floodText(2048)}, {N: 2, Command: "retry", StderrTail: floodText(2048)}}}
	r.Finish(job.ReasonOutputCap)

	stored, first, err := s.store.Record(ctx, r)
	require.NoError(t, err)
	assert.True(t, first)

	inRedis, msg := s.rawCopies(t, "flood-1")
	bound := min(results.DefaultMaxResultBytes, int(s.nc.MaxPayload())-4096)
	assert.LessOrEqual(t, len(inRedis), bound, "Redis holds a bounded result")
	assert.Greater(t, len(inRedis), bound/2, "the bound is used, not wasted")
	assert.Equal(t, inRedis, msg.Data, "the NATS copy is the Redis copy")
	assert.Empty(t, msg.Header.Get(results.HeaderTrimmed))
	decoded := decodeStrict(t, inRedis)

	got, err := s.store.Get(ctx, job.Key("", "flood-1"))
	require.NoError(t, err)
	assert.Equal(t, stored, got)
	assert.Equal(t, decoded, got)
	pub, err := s.client.Get(ctx, "flood-1")
	require.NoError(t, err)
	assert.Equal(t, got, pub)

	for _, o := range []job.Output{got.Stdout, got.Stderr} {
		assert.True(t, o.Truncated)
		assert.NotEmpty(t, o.Text, "a head is kept")
		assert.NotEmpty(t, o.Tail, "a tail is kept")
		assert.Greater(t, o.OmittedBytes, int64(half), "the cut is counted")
		assert.Equal(t, 3*int64(half), o.Bytes, "the total is kept")
	}
	assert.Len(t, got.Attempts, 2)
	assert.Equal(t, "cat /dev/urandom", got.Attempts[0].Command)
	assert.Equal(t, job.ReasonOutputCap, got.Reason)
}

// decodeStrict decodes a stored result as strictly as encoding/json allows.
func decodeStrict(t *testing.T, data []byte) job.Result {
	t.Helper()
	require.True(t, utf8.Valid(data), "valid UTF-8")
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r job.Result
	require.NoError(t, dec.Decode(&r))
	require.False(t, dec.More())
	return r
}

func TestRecordMaxResultBytes(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	text := "H" + strings.Repeat("é", 100<<10) + "T"
	for name, tc := range map[string]struct{ cfg, bound int }{
		"configured":    {cfg: 64 << 10, bound: 64 << 10},
		"below minimum": {cfg: 1, bound: results.MinResultBytes},
	} {
		t.Run(name, func(t *testing.T) {
			st := results.NewStore(s.rdb, s.js, results.StoreConfig{KeyPrefix: s.prefix, MaxResultBytes: tc.cfg})
			id := "max-" + strings.ReplaceAll(name, " ", "-")
			r := okResult(id)
			r.Stdout = job.Output{Text: text, Bytes: int64(len(text))}
			_, _, err := st.Record(ctx, r)
			require.NoError(t, err)
			inRedis, msg := s.rawCopies(t, id)
			assert.LessOrEqual(t, len(inRedis), tc.bound)
			assert.Greater(t, len(inRedis), tc.bound/2)
			assert.Equal(t, inRedis, msg.Data)
			got, err := st.Get(ctx, job.Key("", id))
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(got.Stdout.Text, "Hé"))
			assert.True(t, strings.HasSuffix(got.Stdout.Tail, "éT"))
		})
	}
}

// A result stored larger than NATS can carry (by an older version, or
// before max_payload was lowered) is published with its outputs cut further
// and the header saying so; Redis keeps what it has.
func TestRecordPublishesOversizeStoredResultTrimmed(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	big := okResult("old-big")
	big.FinishedAt = time.Now().UTC().Truncate(time.Millisecond)
	big.Stdout = job.Output{Text: strings.Repeat("é", 1<<20), Bytes: 2 << 20} // 2 MiB > max_payload (1 MiB)
	big.Stderr = job.Output{Text: "E" + strings.Repeat("x", 300<<10) + "Z", Bytes: 300<<10 + 2}
	data, err := json.Marshal(big)
	require.NoError(t, err)
	require.NoError(t, s.rdb.Set(ctx, s.prefix+"result:"+job.Key("", "old-big"), data, time.Hour).Err())

	late := job.Result{ID: "old-big"}
	late.Finish(job.ReasonInfra)
	stored, first, err := s.store.Record(ctx, late)
	require.NoError(t, err)
	assert.False(t, first)
	assert.Equal(t, big, stored)

	full, err := s.store.Get(ctx, job.Key("", "old-big"))
	require.NoError(t, err)
	assert.Equal(t, big.Stdout.Text, full.Stdout.Text, "Redis keeps the stored result")

	_, raw := s.rawCopies(t, "old-big")
	assert.Equal(t, "1", raw.Header.Get(results.HeaderTrimmed))
	assert.Less(t, len(raw.Data), int(s.nc.MaxPayload()))

	pub, err := s.client.Get(ctx, "old-big")
	require.NoError(t, err)
	assert.True(t, pub.Stdout.Truncated)
	assert.Positive(t, pub.Stdout.OmittedBytes)
	assert.True(t, strings.HasPrefix(big.Stdout.Text, pub.Stdout.Text))
	assert.True(t, strings.HasSuffix(big.Stdout.Text, pub.Stdout.Tail))
	assert.True(t, strings.HasPrefix(pub.Stderr.String(), "E"))
	assert.True(t, strings.HasSuffix(pub.Stderr.String(), "Z"))
	assert.Equal(t, stored.Reason, pub.Reason)
}

func TestGetNotFound(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, err := s.store.Get(context.Background(), "nope")
	require.ErrorIs(t, err, results.ErrNotFound)
}

// streamFullCount is the paddock.stream.full sum for stream in reader.
func streamFullCount(t *testing.T, reader *sdkmetric.ManualReader, stream string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "paddock.stream.full" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "paddock.stream.full is an int64 counter")
			for _, dp := range sum.DataPoints {
				if v, ok := dp.Attributes.Value(telemetry.AttrStream); ok && v.AsString() == stream {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// When JetStream has no room for a result (here the tenant's results stream was changed
// to refuse new messages at a tiny size; a server out of JetStream storage
// answers the same way) Record says so with ErrStreamFull, counts
// paddock.stream.full, and the result is republished once there is room.
func TestRecordStreamFullCountsMetric(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	metrics, err := telemetry.NewMetrics(mp.Meter("test"))
	require.NoError(t, err)
	store := results.NewStore(s.rdb, s.js, results.StoreConfig{KeyPrefix: s.prefix, Metrics: metrics})

	sc, err := results.ResultsStreamConfig(results.StreamConfig{}, job.DefaultTenant)
	require.NoError(t, err)
	sc.Discard, sc.MaxBytes = jetstream.DiscardNew, 256
	_, err = s.js.UpdateStream(ctx, sc)
	require.NoError(t, err)
	assert.Zero(t, streamFullCount(t, reader, job.ResultsStream(job.DefaultTenant)))

	stored, first, err := store.Record(ctx, okResult("full-1"))
	require.ErrorIs(t, err, results.ErrNotPublished)
	require.ErrorIs(t, err, results.ErrStreamFull)
	assert.Contains(t, err.Error(), job.ResultsStream(job.DefaultTenant))
	assert.True(t, first, "the result is stored")
	assert.Equal(t, int64(1), streamFullCount(t, reader, job.ResultsStream(job.DefaultTenant)))
	assert.Zero(t, streamFullCount(t, reader, job.JobsStream(job.DefaultTenant)))
	_, err = s.client.Get(ctx, "full-1")
	require.ErrorIs(t, err, client.ErrNotFinished)

	require.NoError(t, results.EnsureStreams(ctx, s.js, results.StreamConfig{}), "the operator makes room")
	n, err := store.RepublishPending(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	got, err := s.client.Get(ctx, "full-1")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
	assert.Equal(t, int64(1), streamFullCount(t, reader, job.ResultsStream(job.DefaultTenant)))
}

func TestFinished(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	_, _, err := s.store.Record(ctx, okResult("fin-1"))
	require.NoError(t, err)
	done, err := s.store.Finished(ctx, []string{job.Key("", "fin-1"), job.Key("", "fin-2"), job.Key("other", "fin-1")})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{job.Key("", "fin-1"): true, job.Key("", "fin-2"): false, job.Key("other", "fin-1"): false}, done)
	done, err = s.store.Finished(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, done)
}
