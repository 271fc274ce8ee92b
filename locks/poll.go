package locks

import (
	"context"
	"math/rand/v2"
	"time"
)

// Polling bounds shared by the flock and the lease wait loops.
const (
	defaultPollMin = 5 * time.Millisecond
	defaultPollMax = 100 * time.Millisecond
)

// backoff yields doubling, jittered poll intervals between min and max, so
// that waiters released at the same moment do not retry in lockstep.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{cur: min, max: max}
}

// next returns a duration in [d/2, d] for the current step d and doubles d.
func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d, or returns the context's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
