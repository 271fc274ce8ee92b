package gateway

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var limT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestLimitersRate(t *testing.T) {
	t.Parallel()
	l := newLimiters(2, 3, 1) // 2/s, burst 3
	for i := range 3 {
		ok, _ := l.allow("a", limT0)
		assert.True(t, ok, "request %d of the burst", i)
	}
	ok, wait := l.allow("a", limT0)
	assert.False(t, ok, "the burst is used up")
	assert.Equal(t, 500*time.Millisecond, wait, "one token comes back every 1/rate")
	// A refused request takes nothing: the token is there after wait.
	ok, _ = l.allow("a", limT0.Add(wait))
	assert.True(t, ok)
	ok, _ = l.allow("a", limT0.Add(wait))
	assert.False(t, ok)
	// Tokens are apart.
	ok, _ = l.allow("b", limT0)
	assert.True(t, ok)
}

func TestLimitersStreams(t *testing.T) {
	t.Parallel()
	l := newLimiters(10, 10, 2)
	r1, ok := l.openStream("a", limT0)
	require.True(t, ok)
	r2, ok := l.openStream("a", limT0)
	require.True(t, ok)
	_, ok = l.openStream("a", limT0)
	assert.False(t, ok, "a third stream of the token")
	_, ok = l.openStream("b", limT0)
	assert.True(t, ok, "another token's stream")
	r1()
	r1() // idempotent: it releases one stream only
	r3, ok := l.openStream("a", limT0)
	assert.True(t, ok)
	_, ok = l.openStream("a", limT0)
	assert.False(t, ok, "a second release of the same stream freed nothing")
	r2()
	r3()
}

// TestLimitersEvict: entries of idle tokens are dropped once their bucket
// is full again, never while they hold a stream, so memory is bounded by
// the tokens in use.
func TestLimitersEvict(t *testing.T) {
	t.Parallel()
	l := newLimiters(10, 20, 1) // refills in 2s
	require.Equal(t, 2*time.Second, l.idle)
	for i := range 10_000 {
		l.allow("token-"+strconv.Itoa(i), limT0)
	}
	release, ok := l.openStream("streaming", limT0)
	require.True(t, ok)
	assert.Equal(t, 10_001, l.size())

	// Before the buckets refilled (and before a sweep is due) nothing goes.
	l.allow("late", limT0.Add(time.Second))
	assert.Equal(t, 10_002, l.size())

	// A sweep once they refilled keeps the token holding a stream and the
	// one seen since.
	later := limT0.Add(sweepEvery)
	l.allow("late", later)
	assert.Equal(t, 2, l.size())
	_, ok = l.openStream("streaming", later)
	assert.False(t, ok, "the stream count survived the sweep")

	release()
	l.allow("late", later.Add(2*sweepEvery))
	assert.Equal(t, 1, l.size(), "a released token goes once idle")

	// A dropped token starts with a full bucket, as it would have kept.
	for range 20 {
		ok, _ := l.allow("token-1", later.Add(2*sweepEvery))
		assert.True(t, ok)
	}
}

func BenchmarkLimitersAllow(b *testing.B) {
	l := newLimiters(1e9, 1<<30, 1)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "token-" + strconv.Itoa(i)
	}
	now := limT0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.allow(keys[i%len(keys)], now)
	}
}
