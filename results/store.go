package results

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/telemetry"
)

// The Store is Paddock's one home in Redis (as asynq's internal/rdb is
// asynq's): every key below StoreConfig.KeyPrefix is read and written here,
// one file per concern, each a few methods that a caller reaches through a
// small interface it declares itself (the scheduler's and the worker's
// stores.go):
//
//	record.go     the terminal result: Record, RecordRun, Get, Finished
//	claims.go     which submission owns a job id: Claim
//	cancel.go     the cancel flag: Cancel, Canceled
//	runs.go       run counts and ownership: BeginRun, BeginRunAs, EndRun, TaskOf
//	admission.go  the tenants' rate window: Admit
//	index.go      the job index: Queued, List, Changes, Reasons
//	republish.go  results whose publish failed: RepublishPending
//
// The key layout is the package doc's.

var (
	// ErrNotFound: no result is stored for the id (the job has not finished,
	// is unknown, or its result expired).
	ErrNotFound = errors.New("results: not found")
	// ErrInvalid is wrapped when Record is given a result it cannot store
	// (invalid id or reason, state not matching the reason).
	ErrInvalid = errors.New("results: invalid result")
	// ErrNotPublished is wrapped when the result is stored in Redis (the
	// returned stored/first values are valid) but its publish on NATS failed.
	// Calling Record again with any result for the id repairs it.
	ErrNotPublished = errors.New("results: stored but not published")
)

// StoreConfig configures a Store. A zero field takes its default.
type StoreConfig struct {
	// Retention of every key the Store writes. Default 24h (DefaultRetention);
	// keep it equal to StreamConfig.ResultRetention.
	Retention time.Duration
	// KeyPrefix of every Redis key. Default "paddock:".
	KeyPrefix string
	// MaxResultBytes bounds a result's JSON encoding (as json.Marshal writes
	// it, escaping included) in Redis and, being the same bytes, on NATS: a
	// larger result has the middle of its outputs cut, proportionally, and is
	// marked (Output.Truncated, OmittedBytes). Default 1 MiB
	// (DefaultMaxResultBytes); a smaller value is raised to MinResultBytes.
	// The bound actually applied is lowered to the NATS server's max_payload
	// minus 4 KiB (room for headers) when that is smaller, so that the
	// published copy is always the stored one. Size Redis's maxmemory and
	// StreamConfig.ResultsMaxBytes for a retention's worth of results.
	MaxResultBytes int
	// Logger, default slog.Default(); the store logs with component=results.
	Logger *slog.Logger
	// Timeout applied to a call whose ctx has no deadline. Default 10s.
	Timeout time.Duration
	// Metrics, optional: paddock.stream.full when JetStream refuses a result
	// because a stream (or its storage) is full.
	Metrics *telemetry.Metrics
}

// Store records and reads terminal results (Redis is authoritative, NATS
// carries them to clients). It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	js  jetstream.JetStream
	cfg StoreConfig
	log *slog.Logger
	// activeTTL: worker → when BeginRunAs last refreshed the TTLs of its
	// active keys (runs.go).
	activeTTL sync.Map
}

//go:embed setnx.lua
var setNXSource string

var setNXScript = redis.NewScript(setNXSource)

// NewStore returns a Store over rdb (results, counters, flags) and js (the
// PADDOCK_RESULTS stream). Non-positive durations and sizes take their
// defaults.
func NewStore(rdb redis.UniversalClient, js jetstream.JetStream, cfg StoreConfig) *Store {
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, "paddock:")
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	cfg.MaxResultBytes = max(cfg.MaxResultBytes, MinResultBytes)
	return &Store{rdb: rdb, js: js, cfg: cfg, log: cfg.Logger.With("component", "results")}
}

// SetMetrics records stream-full errors in m from now on. Call it before
// the Store is used (the CLI starts telemetry after opening the Store).
func (s *Store) SetMetrics(m *telemetry.Metrics) { s.cfg.Metrics = m }

func (s *Store) key(kind, id string) string { return s.cfg.KeyPrefix + kind + ":" + id }

// withTimeout applies the default deadline when ctx has none.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// setNX runs setnx.lua (Record and Claim): created reports whether this
// call wrote val; current is what the key holds now.
func (s *Store) setNX(ctx context.Context, key, val string) (created bool, current string, err error) {
	// The key can expire between the failed SET and the GET; try again then.
	for range 3 {
		res, err := setNXScript.Run(ctx, s.rdb, []string{key}, val, s.cfg.Retention.Milliseconds()).Slice()
		if err != nil {
			return false, "", err
		}
		if len(res) != 2 {
			return false, "", fmt.Errorf("unexpected script reply %v", res)
		}
		if cur, ok := res[1].(string); ok {
			n, _ := res[0].(int64)
			return n == 1, cur, nil
		}
	}
	return false, "", errors.New("key kept expiring between SET NX and GET")
}
