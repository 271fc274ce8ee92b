package worker

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Heartbeat keeps <prefix>worker:<id> alive in Redis while the worker runs,
// and answers the reaper's question whether another owner is alive.
type Heartbeat struct {
	rdb    redis.UniversalClient
	id     string
	prefix string
	ttl    time.Duration

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewHeartbeat returns a heartbeat for worker id with the given TTL
// (refreshed every ttl/3).
func NewHeartbeat(rdb redis.UniversalClient, id, prefix string, ttl time.Duration) *Heartbeat {
	return &Heartbeat{rdb: rdb, id: id, prefix: prefix, ttl: ttl}
}

func (h *Heartbeat) key(id string) string { return h.prefix + "worker:" + id }

// Start writes the first beat synchronously, then beats in the background.
func (h *Heartbeat) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		return nil
	}
	if err := h.beat(ctx); err != nil {
		return err
	}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		t := time.NewTicker(h.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = h.beat(ctx) // a missed beat is retried; the TTL covers two
			}
		}
	}()
	return nil
}

func (h *Heartbeat) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.ttl/3)
	defer cancel()
	return h.rdb.Set(ctx, h.key(h.id), time.Now().UTC().Format(time.RFC3339Nano), h.ttl).Err()
}

// Stop ends the beats and deletes the key (a clean exit needs no reaping
// grace). Idempotent.
func (h *Heartbeat) Stop() {
	h.mu.Lock()
	cancel, done := h.cancel, h.done
	h.cancel = nil
	h.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	ctx, c := context.WithTimeout(context.Background(), 2*time.Second)
	defer c()
	_ = h.rdb.Del(ctx, h.key(h.id)).Err()
}

// Alive reports whether owner's heartbeat key exists.
func (h *Heartbeat) Alive(ctx context.Context, owner string) (bool, error) {
	n, err := h.rdb.Exists(ctx, h.key(owner)).Result()
	return n == 1, err
}
