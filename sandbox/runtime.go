package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/startstop"
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
	wg      sync.WaitGroup // removal workers

	refiller startstop.Service // the warm pool's refill loop (pool.go)
	refill   chan struct{}     // asks the refiller for a pass now

	// runDir holds one control directory per box (Config.RunDir/<owner>).
	runDir string

	stats Stats
}

// Stats are pool counters since start.
type Stats struct {
	Hits, ColdStarts, Removed atomic.Int64
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

// Watchdog is how long a box's init waits for a word from its worker
// before it ends the box (Config.Watchdog).
func (r *Runtime) Watchdog() time.Duration { return r.cfg.Watchdog }

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
	// The removal workers: a destroyed box is removed off the critical
	// path, each removal bounded and its failure logged (the reaper removes
	// what is left).
	for range r.cfg.RemoveWorkers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for b := range r.removeQ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := r.remove(ctx, b, false); err != nil {
					r.cfg.Logger.Warn("remove container", "container", b.name, "err", err)
				}
				cancel()
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
	if err := r.refiller.Start(ctx, r.refillLoop); err != nil {
		return err
	}
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
	// The refiller destroys what it was starting when it sees the stop;
	// only once it has returned may the removal queue close.
	r.refiller.Stop()
	for _, b := range warm {
		r.destroy(b)
	}
	close(r.removeQ)
	r.wg.Wait()
	_ = os.RemoveAll(r.runDir)
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
