package locks

import (
	"context"
	"time"
)

// refreshResult is the outcome of one refresh call.
type refreshResult struct {
	sent time.Time // taken just before the call was sent
	ok   bool      // the key still held our owner token and was extended
	err  error
}

// watch is the lease's watchdog: it refreshes the lease every ttl/3 and
// closes lost when the lease is gone. It returns when the lease is released
// (stop closed) or lost.
//
// Two timers drive it. The refresh timer starts one refresh at a time, in
// its own goroutine; a transient error retries after ttl/10. The expiry
// timer fires at the last good refresh's send time plus the ttl less a
// drift margin: Redis cannot have expired the key before then, and after it
// the lease is reported lost, even while a refresh call is still hanging (a
// go-redis client without ContextTimeoutEnabled ignores deadlines until its
// read timeout). A refresh that finds the key gone or owned by someone else
// loses the lease at once.
func (ls *Lease) watch(obtained time.Time) {
	defer close(ls.done)
	log := ls.leaser.log.With("resource", ls.resource, "token", ls.token)
	interval := ls.ttl / 3
	retry := max(ls.ttl/10, time.Millisecond)
	lastGood := obtained

	refreshTimer := time.NewTimer(interval)
	defer refreshTimer.Stop()
	expiryTimer := time.NewTimer(time.Until(ls.expiry(lastGood)))
	defer expiryTimer.Stop()

	results := make(chan refreshResult, 1)
	var cancel context.CancelFunc // set while a refresh is in flight
	finish := func() {
		if cancel != nil {
			cancel()
			<-results
			cancel = nil
		}
	}
	var lastErr error
	failures := 0
	for {
		select {
		case <-ls.stop:
			finish()
			return

		case <-expiryTimer.C:
			ls.lose(&LostError{Resource: ls.resource, Token: ls.token,
				Reason: "no successful refresh within the ttl (" + ls.ttl.String() + ")", Cause: lastErr})
			log.Error("lease lost: no successful refresh within the ttl", "failures", failures, "err", lastErr)
			finish()
			return

		case <-refreshTimer.C:
			ctx, c := context.WithDeadline(context.Background(), ls.expiry(lastGood))
			cancel = c
			sent := time.Now()
			go func() {
				n, err := refreshScript.run(ctx, ls.leaser.rdb, []string{ls.key}, ls.owner, ls.ttl.Milliseconds()).Int64()
				results <- refreshResult{sent: sent, ok: err == nil && n == 1, err: err}
			}()

		case r := <-results:
			cancel()
			cancel = nil
			switch {
			case r.ok:
				if failures > 0 {
					log.Info("lease refresh recovered", "failures", failures)
				}
				failures, lastErr = 0, nil
				lastGood = r.sent
				expiryTimer.Reset(time.Until(ls.expiry(lastGood)))
				refreshTimer.Reset(interval)
			case r.err == nil:
				ls.lose(&LostError{Resource: ls.resource, Token: ls.token,
					Reason: "the lease key expired or is held by another owner"})
				log.Error("lease lost: key expired or taken over")
				return
			default:
				failures++
				lastErr = r.err
				// Rate-limited: the first failure of a streak is a warning,
				// the retries that follow are debug noise.
				if failures == 1 {
					log.Warn("lease refresh failed; retrying until the ttl runs out", "err", r.err)
				} else {
					log.Debug("lease refresh failed again", "failures", failures, "err", r.err)
				}
				refreshTimer.Reset(retry)
			}
		}
	}
}

// expiry is the instant after which the lease may have expired in Redis,
// given a refresh (or the obtain) sent at sent: the ttl less a margin for
// the server's clock running faster than ours (1% + 2 ms, as in Redlock).
func (ls *Lease) expiry(sent time.Time) time.Time {
	return sent.Add(ls.ttl - ls.ttl/100 - 2*time.Millisecond)
}

func (ls *Lease) lose(err *LostError) {
	ls.mu.Lock()
	ls.err = err
	ls.mu.Unlock()
	close(ls.lost)
}
