package sandbox

import (
	"context"
	"sync"
	"time"
)

// The warm pool: per profile (image + limits), containers started ahead of
// demand so that a job takes a ready one instead of a cold start. The
// refiller is a service (Runtime.refiller) started and stopped with the
// Runtime; the pool's books are guarded by Runtime.mu.
//
// How many boxes a profile keeps (its target), the rule in full:
//
//   - reserve = min(PoolSize, PoolMax / profiles in use), at least 1: what
//     every recently used profile is refilled to before any profile grows
//     above its reserve, so that one busy profile cannot starve another.
//   - demand = PoolSize + floor(λ × L), where λ is the profile's takes (hits
//     and misses) over the last PoolWindow divided by PoolWindow, and L is
//     the profile's measured start latency (a moving average of its refill
//     starts). By Little's law λ × L boxes are, on average, in the middle of
//     starting while takes come at rate λ: the pool keeps PoolSize boxes
//     warm on top of them. A profile taken from less often than once per L
//     keeps exactly PoolSize.
//   - target = demand, bounded below by the reserve and above by PoolMax
//     minus the other profiles' reserves.
//
// When demand falls, takes leave the window and the target shrinks back;
// warm boxes above a profile's target are retired on the refiller's next
// pass, which also gives room back when PoolMax binds. The refiller starts
// up to PoolStarts boxes at once; the total of warm and starting boxes of
// all profiles never passes PoolMax.

// maxTakes bounds the takes a pool remembers: past it the demand is
// counted as if the window held maxTakes takes (the target is at its cap
// long before).
const maxTakes = 4096

// pool is the warm containers of one profile.
type pool struct {
	profile  Profile
	warm     []*box
	starting int
	lastUsed time.Time
	// takes are the times of the takes within the demand window, oldest
	// first; latency is the moving average of the refill's start times
	// (0 until the first start).
	takes   []time.Time
	latency time.Duration
}

// noteTake records a take at now and forgets takes older than window.
func (p *pool) noteTake(now time.Time, window time.Duration) {
	p.lastUsed = now
	p.forget(now, window)
	if len(p.takes) >= maxTakes {
		p.takes = p.takes[1:]
	}
	p.takes = append(p.takes, now)
}

// forget drops the takes older than window.
func (p *pool) forget(now time.Time, window time.Duration) {
	i := 0
	for i < len(p.takes) && now.Sub(p.takes[i]) > window {
		i++
	}
	if i > 0 {
		p.takes = append(p.takes[:0], p.takes[i:]...)
	}
}

// noteStart folds one start's duration into the moving average (weight
// 1/4: a few starts follow a change of load).
func (p *pool) noteStart(d time.Duration) {
	if p.latency == 0 {
		p.latency = d
		return
	}
	p.latency += (d - p.latency) / 4
}

// demand is PoolSize plus the boxes in the middle of starting at the
// profile's take rate (the rule above).
func (p *pool) demand(now time.Time, size int, window time.Duration) int {
	p.forget(now, window)
	return size + int(int64(len(p.takes))*int64(p.latency)/int64(window))
}

// have is the pool's warm and starting boxes.
func (p *pool) have() int { return len(p.warm) + p.starting }

// kick asks the refiller for a pass now.
func (r *Runtime) kick() {
	select {
	case r.refill <- struct{}{}:
	default:
	}
}

// refillLoop keeps each recently used profile's pool at its target (the
// rule above), at most PoolStarts starts at once, retires warm containers
// past PoolIdleTTL or above their pool's target and forgets idle profiles.
// A start that fails holds new starts back for a second (a cold start still
// serves jobs). On return, the starts in flight have ended: a box started
// after the stop is destroyed by its start (fill).
func (r *Runtime) refillLoop(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan error, r.cfg.PoolStarts) // one slot per start in flight
	inflight := 0
	var hold <-chan time.Time // set while backing off after a failed start
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.refill:
		case <-tick.C:
		case <-hold:
			hold = nil
		case err := <-done:
			inflight--
			if err != nil {
				r.cfg.Logger.Warn("warm pool: start container", "err", err)
				hold = time.After(time.Second)
			}
		}
		r.retireIdle()
		for hold == nil && inflight < r.cfg.PoolStarts {
			p := r.nextToFill()
			if p == nil {
				break
			}
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				done <- r.fill(ctx, p)
			}()
		}
	}
}

// fill starts one box for p, whose starting count nextToFill raised, and
// puts it in the warm list; a box that is not wanted any more (the runtime
// stopped, the box died) is destroyed. Its error is nil when ctx ended.
func (r *Runtime) fill(ctx context.Context, p *pool) error {
	t0 := time.Now()
	b, err := r.startBox(ctx, p.profile, nil)
	r.mu.Lock()
	p.starting--
	if err == nil {
		p.noteStart(time.Since(t0))
		if !r.stopped && b.alive() {
			p.warm = append(p.warm, b)
			b = nil
		}
	}
	r.mu.Unlock()
	if b != nil {
		r.destroy(b)
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// targetsLocked returns every pool's target (the rule above) and reserve.
// r.mu is held.
func (r *Runtime) targetsLocked(now time.Time) (target map[*pool]int, reserve int) {
	n := max(1, len(r.pools))
	reserve = max(1, min(r.cfg.PoolSize, r.cfg.PoolMax/n))
	ceiling := max(reserve, r.cfg.PoolMax-(n-1)*reserve)
	target = make(map[*pool]int, len(r.pools))
	for _, p := range r.pools {
		target[p] = min(max(reserve, p.demand(now, r.cfg.PoolSize, r.cfg.PoolWindow)), ceiling)
	}
	return target, reserve
}

// nextToFill picks the pool to start a box for and counts it as starting,
// or returns nil when every pool is at its target or PoolMax binds. A pool
// below its reserve comes first; among equals, the least filled.
func (r *Runtime) nextToFill() *pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	total := 0
	for _, p := range r.pools {
		total += p.have()
	}
	if total >= r.cfg.PoolMax {
		return nil
	}
	target, reserve := r.targetsLocked(time.Now())
	rank := func(p *pool) int { // lower first
		if p.have() < reserve {
			return p.have() - r.cfg.PoolMax
		}
		return p.have()
	}
	var best *pool
	for _, p := range r.pools {
		if p.have() < target[p] && (best == nil || rank(p) < rank(best)) {
			best = p
		}
	}
	if best != nil {
		best.starting++
	}
	return best
}

// retireIdle retires warm boxes that are dead, past PoolIdleTTL or above
// their pool's target (oldest first), and forgets profiles unused for
// PoolIdleTTL.
func (r *Runtime) retireIdle() {
	now := time.Now()
	var old []*box
	r.mu.Lock()
	target, _ := r.targetsLocked(now)
	for k, p := range r.pools {
		keep := p.warm[:0]
		for _, b := range p.warm {
			if now.Sub(b.created) > r.cfg.PoolIdleTTL || !b.alive() {
				old = append(old, b)
			} else {
				keep = append(keep, b)
			}
		}
		clear(p.warm[len(keep):])
		if surplus := len(keep) - target[p]; surplus > 0 {
			old = append(old, keep[:surplus]...)
			keep = keep[surplus:]
		}
		p.warm = keep
		if now.Sub(p.lastUsed) > r.cfg.PoolIdleTTL && len(p.warm) == 0 && p.starting == 0 {
			delete(r.pools, k)
		}
	}
	r.mu.Unlock()
	for _, b := range old {
		r.destroy(b)
	}
}

// take returns a never-used warm container for p, or nil.
func (r *Runtime) take(p Profile) *box {
	k := p.key()
	if k == "" || r.cfg.PoolSize < 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	pl := r.pools[k]
	if pl == nil {
		pl = &pool{profile: p}
		r.pools[k] = pl
	}
	pl.noteTake(time.Now(), r.cfg.PoolWindow)
	defer r.kick()
	for len(pl.warm) > 0 {
		b := pl.warm[0]
		pl.warm = pl.warm[1:]
		if b.alive() && b.used.CompareAndSwap(false, true) {
			return b
		}
		go r.destroy(b)
	}
	return nil
}

// PoolSize returns the number of warm containers ready now.
func (r *Runtime) PoolSize() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pools {
		n += len(p.warm)
	}
	return n
}
