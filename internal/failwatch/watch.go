// Package failwatch observes failovers of the fleet's shared services from
// inside a process that uses them: a Redis master that changed (a replica
// promoted by Sentinel, or a master that restarted) and JetStream streams
// whose leader moved to another server. Each process counts what it saw
// in its own metrics (telemetry.Metrics.FailoverSeen); the fleet as a
// whole keeps, in Redis, the masters it has known and the leader changes
// of each stream, counted once however many processes watch, for the
// operator's fleet view (scheduler.OperatorView, `paddock fleet`).
//
// What it relies on: Redis gives every replication history an id
// (INFO replication, master_replid) that a replica adopts from its master
// and that changes when a replica is promoted (REPLICAOF NO ONE, as
// Sentinel does) or a master starts without its replication state; and
// JetStream's stream info names each stream's current leader.
package failwatch

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/telemetry"
)

//go:embed master.lua
var masterSource string

//go:embed leader.lua
var leaderSource string

var (
	masterScript = redis.NewScript(masterSource)
	leaderScript = redis.NewScript(leaderSource)
)

// Keys under the fleet's Redis key prefix (the fleet view reads them).
const (
	MastersKey       = "fleet:redis-masters"         // sorted set: master replication id → first seen, Unix ms
	LeadersKey       = "fleet:stream-leaders"        // hash: stream → its leader
	LeaderChangesKey = "fleet:stream-leader-changes" // hash: stream → changes; "*" all; "*at" the last, Unix ms
	RescuedKey       = "fleet:rescued"               // string: runs of dead workers the fleet's rescuers enqueued again
	// MastersKept bounds MastersKey: the last masters the fleet knew.
	MastersKept = 100
)

// NoteRescue counts one rescued run in the fleet's Redis (RescuedKey),
// for the fleet view; the rescuer's OnRescue calls it. A rescue is rare
// (a worker died): one INCR each.
func NoteRescue(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rdb.Incr(ctx, cmp.Or(prefix, "paddock:")+RescuedKey).Err()
}

// Config configures a Watcher. A zero field takes its default.
type Config struct {
	// KeyPrefix of Paddock's Redis keys (default "paddock:").
	KeyPrefix string
	// Interval between looks (default 5 s): one INFO, and with JetStream one
	// stream list, per look.
	Interval time.Duration
	// JetStream, optional: watch the leaders of the streams whose names
	// start with StreamPrefix (default "PADDOCK_"). Give it in the
	// schedulers, not in every worker: a stream list per look is a
	// JetStream API request answered by the meta leader.
	JetStream    jetstream.JetStream
	StreamPrefix string
	// Metrics, optional, counts the failovers this process saw.
	Metrics *telemetry.Metrics
	// Logger, default slog.Default(), with component=failwatch.
	Logger *slog.Logger
}

// Watcher is a restartable service that looks at the shared services
// every Interval (Start / Stop).
type Watcher struct {
	rdb redis.UniversalClient
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	replid  string            // the master's replication id at the last look
	leaders map[string]string // stream → leader at the last look

	svc startstop.Service
}

// New returns a stopped Watcher over rdb, the fleet's Redis.
func New(rdb redis.UniversalClient, cfg Config) *Watcher {
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, "paddock:")
	cfg.StreamPrefix = cmp.Or(cfg.StreamPrefix, "PADDOCK_")
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With("component", "failwatch")
	return &Watcher{rdb: rdb, cfg: cfg, log: log, leaders: map[string]string{}}
}

// Start looks once in the background at once, then every Interval.
func (w *Watcher) Start(ctx context.Context) error {
	return w.svc.Start(ctx, func(ctx context.Context) {
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			w.Look(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Stop ends the looks. Idempotent.
func (w *Watcher) Stop() { w.svc.Stop() }

// Look looks at Redis and, with JetStream, at the streams' leaders once;
// a service that cannot be read now is logged at debug and looked at
// again next time (its outage is what the fleet view shows).
func (w *Watcher) Look(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(w.cfg.Interval, 2*time.Second))
	defer cancel()
	if err := w.redis(ctx); err != nil {
		w.log.Debug("cannot read the Redis master's replication id", "err", err)
	}
	if w.cfg.JetStream != nil {
		if err := w.streams(ctx); err != nil {
			w.log.Debug("cannot list the streams' leaders", "err", err)
		}
	}
}

// redis notes the master's replication id; a change is a failover seen.
func (w *Watcher) redis(ctx context.Context) error {
	info, err := w.rdb.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	id := InfoField(info, "master_replid")
	if id == "" {
		return fmt.Errorf("failwatch: INFO replication has no master_replid")
	}
	w.mu.Lock()
	prev := w.replid
	w.replid = id
	w.mu.Unlock()
	if prev != "" && prev != id {
		w.log.Warn("the Redis master changed (a failover or a restart)", "replid", id, "was", prev,
			"role", InfoField(info, "role"))
		w.cfg.Metrics.FailoverSeen(ctx, "redis", "master")
	}
	return masterScript.Run(ctx, w.rdb, []string{w.cfg.KeyPrefix + MastersKey},
		id, time.Now().UnixMilli(), MastersKept).Err()
}

// streams notes every watched stream's leader; a change is a failover seen.
func (w *Watcher) streams(ctx context.Context) error {
	lister := w.cfg.JetStream.ListStreams(ctx)
	keys := []string{w.cfg.KeyPrefix + LeadersKey, w.cfg.KeyPrefix + LeaderChangesKey}
	for info := range lister.Info() {
		name := info.Config.Name
		if !strings.HasPrefix(name, w.cfg.StreamPrefix) || info.Cluster == nil || info.Cluster.Leader == "" {
			continue
		}
		leader := info.Cluster.Leader
		w.mu.Lock()
		prev := w.leaders[name]
		w.leaders[name] = leader
		w.mu.Unlock()
		if prev == leader {
			continue // as at the last look: nothing to note
		}
		if prev != "" {
			w.log.Info("a stream's leader changed", "stream", name, "leader", leader, "was", prev)
			w.cfg.Metrics.FailoverSeen(ctx, "nats", "stream_leader")
		}
		if err := leaderScript.Run(ctx, w.rdb, keys, name, leader, time.Now().UnixMilli()).Err(); err != nil {
			return err
		}
	}
	return lister.Err()
}

// InfoField is field's value in the text of a Redis INFO reply ("" when
// absent).
func InfoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}
