package retrydelay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/internal/retrydelay"
)

func TestNthExact(t *testing.T) {
	for n, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 1 << 40: 30 * time.Second} {
		assert.Equal(t, want, retrydelay.Nth(n, time.Second, 30*time.Second, 0), "retry %d", n)
	}
}

func TestNthJitterStaysInBand(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 200 {
		d := retrydelay.Nth(3, time.Second, 30*time.Second, 0.2)
		assert.GreaterOrEqual(t, d, 3200*time.Millisecond)
		assert.LessOrEqual(t, d, 4800*time.Millisecond)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1, "jitter varies the delay")
	d := retrydelay.Nth(100, time.Second, 30*time.Second, 0.2)
	assert.LessOrEqual(t, d, 36*time.Second, "the cap holds (plus jitter)")
}

func TestNewNeverStops(t *testing.T) {
	b := retrydelay.New(time.Millisecond, 4*time.Millisecond, 0)
	for range 1000 {
		assert.Positive(t, b.NextBackOff())
	}
}
