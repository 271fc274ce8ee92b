// Package retrydelay gives the delay before the nth retry of an exponential
// backoff (cenkalti/backoff/v5), for the retries whose count the queue
// keeps rather than the caller: a JetStream redelivery (NumDelivered) and
// an asynq retry (the retried count).
package retrydelay

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// maxSteps bounds the doubling: 2^64 of any interval is past every cap.
const maxSteps = 64

// Nth is the delay before retry n (1 = the first): lo·2^(n-1), capped at
// hi, randomized by ±jitter (0.2 = ±20%; 0 = exact). n < 1 counts as 1.
func Nth(n uint64, lo, hi time.Duration, jitter float64) time.Duration {
	b := New(lo, hi, jitter)
	d := b.NextBackOff()
	for i := uint64(1); i < min(n, maxSteps); i++ {
		d = b.NextBackOff()
	}
	return d
}

// New is an exponential backoff from lo to hi that never stops (a caller
// that gives up decides so itself), randomized by ±jitter.
func New(lo, hi time.Duration, jitter float64) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: lo, MaxInterval: max(lo, hi), Multiplier: 2, RandomizationFactor: jitter}
	b.Reset()
	return b
}
