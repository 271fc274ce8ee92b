package sandbox

import (
	"context"
	"time"
)

// The warm pool: per profile (image + limits), containers started ahead of
// demand so that a job takes a ready one instead of a cold start. The
// refiller is a service (Runtime.refiller) started and stopped with the
// Runtime; the pool's books are guarded by Runtime.mu.

// pool is the warm containers of one profile.
type pool struct {
	profile  Profile
	warm     []*box
	starting int
	lastUsed time.Time
}

// kick asks the refiller for a pass now.
func (r *Runtime) kick() {
	select {
	case r.refill <- struct{}{}:
	default:
	}
}

// refillLoop keeps each recently used profile's pool at PoolSize, retires
// warm containers past PoolIdleTTL and forgets idle profiles.
func (r *Runtime) refillLoop(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.refill:
		case <-tick.C:
		}
		r.retireIdle()
		for {
			p := r.nextToFill()
			if p == nil {
				break
			}
			b, err := r.startBox(ctx, p.profile, nil)
			r.mu.Lock()
			p.starting--
			if err == nil && !r.stopped && b.alive() {
				p.warm = append(p.warm, b)
				b = nil
			}
			r.mu.Unlock()
			if b != nil {
				r.destroy(b)
			}
			if err != nil {
				if ctx.Err() == nil {
					r.cfg.Logger.Warn("warm pool: start container", "image", p.profile.Image, "err", err)
				}
				select { // back off; a cold start still serves jobs
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				break
			}
		}
	}
}

func (r *Runtime) nextToFill() *pool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil
	}
	total := 0
	for _, p := range r.pools {
		total += len(p.warm) + p.starting
	}
	if total >= r.cfg.PoolMax {
		return nil
	}
	var best *pool
	for _, p := range r.pools {
		if n := len(p.warm) + p.starting; n < r.cfg.PoolSize && (best == nil || n < len(best.warm)+best.starting) {
			best = p
		}
	}
	if best != nil {
		best.starting++
	}
	return best
}

func (r *Runtime) retireIdle() {
	now := time.Now()
	var old []*box
	r.mu.Lock()
	for k, p := range r.pools {
		keep := p.warm[:0]
		for _, b := range p.warm {
			if now.Sub(b.created) > r.cfg.PoolIdleTTL || !b.alive() {
				old = append(old, b)
			} else {
				keep = append(keep, b)
			}
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
	pl.lastUsed = time.Now()
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
