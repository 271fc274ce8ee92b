package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// WorkspaceDir is the job's working directory: a size-capped tmpfs, or the
// shared volume when the job has one.
const WorkspaceDir = "/workspace"

// Runtime owns the warm pool, background removal and the reaper's view of
// which containers are in use.
type Runtime struct {
	docker DockerClient
	cfg    Config
	seq    atomic.Int64

	removeQ chan *box

	mu      sync.Mutex
	pools   map[string]*pool // by profile key
	live    map[string]bool  // container names this runtime owns
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup // removal workers
	refDone chan struct{}  // closed when the refiller has returned
	refill  chan struct{}

	// runDir holds one control directory per box (Config.RunDir/<owner>).
	runDir string

	stats Stats
}

// Stats are pool counters since start.
type Stats struct {
	Hits, ColdStarts, Removed atomic.Int64
}

type pool struct {
	profile  Profile
	warm     []*box
	starting int
	lastUsed time.Time
}

// New returns a Runtime; call Start to run its pool and removal loops.
func New(docker DockerClient, cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Runtime{
		docker: docker, cfg: cfg,
		removeQ: make(chan *box, 1024),
		pools:   map[string]*pool{}, live: map[string]bool{},
		refill: make(chan struct{}, 1),
		runDir: ownerRunDir(cfg.RunDir, cfg.Owner),
	}, nil
}

// Owner is the owner label of this runtime's containers.
func (r *Runtime) Owner() string { return r.cfg.Owner }

// Stats returns the pool counters.
func (r *Runtime) Stats() *Stats { return &r.stats }

// Start runs the removal workers and the pool refiller. Warm lists profiles
// to keep warm from the start. Start is idempotent.
func (r *Runtime) Start(ctx context.Context, warm ...Profile) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return ErrClosed
	}
	if r.started {
		return nil
	}
	// The run directory is private to this worker: boxes mount only their
	// own subdirectory of it.
	if err := os.MkdirAll(r.cfg.RunDir, 0o711); err != nil {
		return fmt.Errorf("%w: run directory: %v", ErrConfig, err)
	}
	_ = os.RemoveAll(r.runDir) // left by an earlier process with this owner id
	if err := os.Mkdir(r.runDir, 0o700); err != nil {
		return fmt.Errorf("%w: run directory: %v", ErrConfig, err)
	}
	r.started = true
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for range r.cfg.RemoveWorkers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for b := range r.removeQ {
				r.remove(b)
				r.stats.Removed.Add(1)
			}
		}()
	}
	now := time.Now()
	for _, p := range warm {
		p = p.withDefaults()
		if k := p.key(); k != "" && r.cfg.PoolSize > 0 {
			r.pools[k] = &pool{profile: p, lastUsed: now}
		}
	}
	r.refDone = make(chan struct{})
	go r.refillLoop(ctx)
	r.kick()
	return nil
}

// Stop destroys every warm container and waits for pending removals.
// Sessions still open are not waited for: close them first (the worker
// drains its jobs before stopping the runtime). Idempotent.
func (r *Runtime) Stop() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	started := r.started
	var warm []*box
	for _, p := range r.pools {
		warm = append(warm, p.warm...)
		p.warm = nil
	}
	r.mu.Unlock()
	if !started {
		return
	}
	r.cancel()
	for _, b := range warm {
		r.destroy(b)
	}
	// The refiller destroys what it was starting when it sees the stop;
	// only then may the removal queue close.
	<-r.refDone
	close(r.removeQ)
	r.wg.Wait()
	_ = os.RemoveAll(r.runDir)
}

func (r *Runtime) kick() {
	select {
	case r.refill <- struct{}{}:
	default:
	}
}

func (r *Runtime) track(name string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.live[name] = true
	} else {
		delete(r.live, name)
	}
}

func (r *Runtime) tracked(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live[name]
}

// refillLoop keeps each recently used profile's pool at PoolSize, retires
// warm containers past PoolIdleTTL and forgets idle profiles.
func (r *Runtime) refillLoop(ctx context.Context) {
	defer close(r.refDone)
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

// Acquire returns a Session in a never-used container for p: a warm one when
// the pool has one, else a cold start. The session's container is destroyed
// when the session is closed or when deadline passes, whichever is first.
func (r *Runtime) Acquire(ctx context.Context, p Profile, opts SessionOptions) (*Session, error) {
	r.mu.Lock()
	stopped, started := r.stopped, r.started
	r.mu.Unlock()
	if stopped || !started {
		return nil, ErrClosed
	}
	if p.Image == "" {
		return nil, fmt.Errorf("%w: profile has no image", ErrConfig)
	}
	p = p.withDefaults()
	b, pooled := r.take(p), true
	if b == nil {
		pooled = false
		var err error
		b, err = r.startBox(ctx, p, opts.Labels)
		if err != nil {
			return nil, err
		}
		b.used.Store(true)
		r.stats.ColdStarts.Add(1)
	} else {
		r.stats.Hits.Add(1)
	}
	return newSession(r, b, p, pooled, opts), nil
}

// ownerRunDir is the control directory root of one owner's boxes.
func ownerRunDir(runDir, owner string) string { return filepath.Join(runDir, sanitizeName(owner)) }
