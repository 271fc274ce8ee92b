package worker

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// Heartbeat keeps <prefix>worker:<id> alive in Redis while the worker runs,
// and answers the reaper's question whether another owner is alive. The
// key's value is the worker's job.WorkerBeat (host, concurrency, running
// jobs, warm pool), for the operator's fleet view; only its existence
// says the worker is alive.
//
// Every beat also records the worker in the <prefix>workers sorted set
// (score: last beat, Unix ms) and its job.WorkerBeat in the hash
// <prefix>workers:last (every knownEvery beats; entries older than
// knownWorkersTTL are trimmed from both). An owner whose key is gone is dead only if this fleet knew it:
// containers of an owner this Redis never heard of belong to another fleet
// sharing the Docker engine (another deployment, a concurrent test run) and
// are not this fleet's to reap.
//
// Self-fencing: a worker whose beats failed for FenceAfter (TTL minus a
// margin, on its own monotonic clock since the last renewal that
// succeeded, counted from when it was sent) is about to be judged dead and
// its jobs rescued (internal/asynqx.Rescuer). It then fences itself first: the epoch
// moves on, OnFence runs (the worker cancels every running job), and until
// a beat succeeds again Fenced reports true. A job started in an earlier
// epoch never records a result.
type Heartbeat struct {
	rdb      redis.UniversalClient
	id       string
	prefix   string
	ttl      time.Duration
	interval time.Duration
	fenceAt  time.Duration
	// OnFence, when set, is called (outside any lock) each time the
	// heartbeat fences itself. Set it before Start.
	OnFence func()
	// Status, when set, fills the worker's facts written with every beat
	// (job.WorkerBeat: concurrency, running jobs, warm pool); the beat sets
	// the id, host, pid and times. It must be cheap and safe for concurrent
	// use. Set it before Start.
	Status func(*job.WorkerBeat)

	host    string
	started time.Time

	mu     sync.Mutex
	last   time.Time // when the last successful renewal was sent (monotonic)
	epoch  uint64
	fenced bool
	beats  int

	svc startstop.Service
}

// NewHeartbeat returns a heartbeat for worker id with the given TTL,
// refreshed every second (at most every ttl/3), fencing itself ttl/3
// before the key could expire.
func NewHeartbeat(rdb redis.UniversalClient, id, prefix string, ttl time.Duration) *Heartbeat {
	return NewHeartbeatEvery(rdb, id, prefix, ttl, 0)
}

// NewHeartbeatEvery is NewHeartbeat beating every interval (0: 1 s, at
// most ttl/3).
func NewHeartbeatEvery(rdb redis.UniversalClient, id, prefix string, ttl, interval time.Duration) *Heartbeat {
	if interval <= 0 {
		interval = min(time.Second, ttl/3)
	}
	host, _ := os.Hostname()
	return &Heartbeat{rdb: rdb, id: id, prefix: prefix, ttl: ttl, interval: interval, fenceAt: ttl - ttl/3,
		host: host, started: time.Now().UTC()}
}

// record is the value of the heartbeat key at sent: the worker's
// job.WorkerBeat as JSON.
func (h *Heartbeat) record(sent time.Time) string {
	b := job.WorkerBeat{}
	if h.Status != nil {
		h.Status(&b)
	}
	b.ID, b.Host, b.PID, b.StartedAt, b.BeatAt = h.id, h.host, os.Getpid(), h.started, sent.UTC()
	v, _ := json.Marshal(b) // a struct of numbers, strings and times
	return string(v)
}

func (h *Heartbeat) key(id string) string { return h.prefix + "worker:" + id }

func (h *Heartbeat) known() string { return h.prefix + "workers" }

// lastBeats is the hash of every known worker's last job.WorkerBeat, written
// with the known set: the fleet view's facts of a worker whose key
// expired (its host, above all).
func (h *Heartbeat) lastBeats() string { return h.prefix + "workers:last" }

//go:embed heartbeat_trim.lua
var trimSource string

var trimScript = redis.NewScript(trimSource)

// knownWorkersTTL is how long a dead worker stays known (its leftover
// containers reapable) after its last beat.
const knownWorkersTTL = 7 * 24 * time.Hour

// Beats apart the known-workers set is updated (its score, the last beat,
// is what the dashboard shows: 10 s resolution at the default 1 s beat)
// and trimmed. Every beat renews the key; an idle worker's heartbeat costs
// ~1.2 Redis commands a second.
const (
	knownEvery = 10
	trimEvery  = 60
)

// Start writes the first beat synchronously, then beats in the background
// and watches the fence (every interval/4).
func (h *Heartbeat) Start(ctx context.Context) error {
	return h.svc.StartWith(ctx, h.beat, func(ctx context.Context) {
		watch := time.NewTicker(max(h.interval/4, time.Millisecond))
		defer watch.Stop()
		beat := time.NewTicker(h.interval)
		defer beat.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-watch.C:
				h.check(time.Now())
			case <-beat.C:
				_ = h.beat(ctx) // a missed beat is retried; the fence covers a run of them
			}
		}
	})
}

func (h *Heartbeat) beat(ctx context.Context) error {
	sent := time.Now()
	h.check(sent) // a beat after a long silence fences before it renews
	ctx, cancel := context.WithTimeout(ctx, h.interval)
	defer cancel()
	h.mu.Lock()
	h.beats++
	known, trim := h.beats%knownEvery == 1, h.beats%trimEvery == 1
	h.mu.Unlock()
	rec := h.record(sent)
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, h.key(h.id), rec, h.ttl)
		if known {
			p.ZAdd(ctx, h.known(), redis.Z{Score: float64(sent.UnixMilli()), Member: h.id})
			p.HSet(ctx, h.lastBeats(), h.id, rec)
		}
		if trim {
			trimScript.Eval(ctx, p, []string{h.known(), h.lastBeats()}, sent.Add(-knownWorkersTTL).UnixMilli())
		}
		return nil
	})
	if err == nil {
		h.mu.Lock()
		if sent.After(h.last) {
			h.last, h.fenced = sent, false
		}
		h.mu.Unlock()
	}
	return err
}

// check fences the worker when the last renewal was sent more than
// FenceAfter before now.
func (h *Heartbeat) check(now time.Time) {
	h.mu.Lock()
	fire := !h.last.IsZero() && !h.fenced && now.Sub(h.last) > h.fenceAt
	if fire {
		h.fenced = true
		h.epoch++
	}
	h.mu.Unlock()
	if fire && h.OnFence != nil {
		h.OnFence()
	}
}

// Epoch returns the current fence epoch and whether the worker is fenced
// now (its heartbeat may have expired: it must not start or end a job). A
// job started in epoch e may record its result only while Epoch still
// returns e, false.
func (h *Heartbeat) Epoch() (epoch uint64, fenced bool) {
	h.check(time.Now())
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch, h.fenced
}

// Stop ends the beats and deletes the key (a clean exit needs no reaping
// grace). Idempotent.
func (h *Heartbeat) Stop() {
	if !h.svc.Stop() {
		return
	}
	ctx, c := context.WithTimeout(context.Background(), 2*time.Second)
	defer c()
	_ = h.rdb.Del(ctx, h.key(h.id)).Err()
}

// Alive reports whether owner's heartbeat key exists, or owner is not a
// worker of this fleet (never beat in this Redis): only a known worker whose
// heartbeat expired is dead.
func (h *Heartbeat) Alive(ctx context.Context, owner string) (bool, error) {
	var exists *redis.IntCmd
	var seen *redis.FloatCmd
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, h.key(owner))
		seen = p.ZScore(ctx, h.known(), owner)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if exists.Val() == 1 {
		return true, nil
	}
	return errors.Is(seen.Err(), redis.Nil), nil // unknown owner: not ours
}
