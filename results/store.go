package results

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry"
)

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
	// ErrStaleTask is wrapped by BeginRunAs when the task starting the run
	// no longer carries the job: a rescuer re-enqueued it under another task
	// id after its worker died. The delivery must complete without running.
	ErrStaleTask = errors.New("results: stale task")
)

// HeaderTrimmed is set ("1") on a published result that is shorter than the
// one Redis holds: its outputs were cut further to fit the NATS max_payload.
// Record stores results already bounded to fit it (StoreConfig.MaxResultBytes),
// so this happens only for a result stored larger (by an older version, or
// before the server's max_payload was lowered); Store.Get returns the stored
// one.
const HeaderTrimmed = "Paddock-Result-Trimmed"

// Bounds of StoreConfig.MaxResultBytes.
const (
	DefaultMaxResultBytes = 1 << 20
	MinResultBytes        = 16 << 10
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
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "paddock:"
	}
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

// Record makes r the job's terminal result unless one is already stored:
// SET <prefix>result:<tenant>/<id> NX PX retention (r.Key()). It returns the stored result
// (r, completed with V, State and FinishedAt and bounded to MaxResultBytes,
// when first is true; the earlier one, unchanged, when first is false) and
// then always publishes the stored result on job.ResultSubject(tenant, id), so that
// calling Record again repairs a publish lost in a crash. The job index
// (index.go) takes the stored result's state, one more round trip. On a publish
// failure the error wraps ErrNotPublished (and ErrStreamFull when JetStream
// had no room) and stored/first are still valid.
func (s *Store) Record(ctx context.Context, r job.Result) (stored job.Result, first bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := complete(&r); err != nil {
		return job.Result{}, false, err
	}
	limit := s.resultLimit()
	data, trimmed, err := fit(r, limit)
	if err != nil {
		return job.Result{}, false, fmt.Errorf("results: encode %s: %w", r.ID, err)
	}
	if trimmed {
		s.log.Warn("result larger than the bound: outputs cut from the middle before storing",
			"job", r.ID, "bound", limit, "stored_bytes", len(data))
	}
	first, raw, err := s.setNX(ctx, s.key("result", r.Key()), string(data))
	if err != nil {
		return job.Result{}, false, fmt.Errorf("results: record %s: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(raw), &stored); err != nil {
		return job.Result{}, false, fmt.Errorf("results: stored result of %s is corrupt: %w", r.ID, err)
	}
	s.index(ctx, finalWrite(stored)) // index.go: the stored result, whichever Record wrote it
	if err := s.publish(ctx, stored, []byte(raw)); err != nil {
		s.markUnpublished(ctx, r.Key()) // republish.go
		return stored, first, fmt.Errorf("%w: %s: %w", ErrNotPublished, r.ID, err)
	}
	return stored, first, nil
}

// complete validates r and fills the fields a stored result always has.
func complete(r *job.Result) error {
	if r.Tenant == "" {
		r.Tenant = job.DefaultTenant
	}
	if err := job.CheckTenant(r.Tenant); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, r.ID, err)
	}
	if !job.ValidID(r.ID) {
		return fmt.Errorf("%w: id %q must match [A-Za-z0-9._-]{1,128}", ErrInvalid, r.ID)
	}
	if !r.Reason.Valid() {
		return fmt.Errorf("%w: %s: unknown reason %q", ErrInvalid, r.ID, r.Reason)
	}
	if r.State == "" {
		r.State = r.Reason.State()
	}
	if r.State != r.Reason.State() {
		return fmt.Errorf("%w: %s: state %q does not match reason %q (want %q)", ErrInvalid, r.ID, r.State, r.Reason, r.Reason.State())
	}
	r.V = job.Version
	if r.FinishedAt.IsZero() {
		r.FinishedAt = time.Now().UTC()
	}
	return nil
}

// setNX runs setnx.lua: created reports whether this call wrote val;
// current is what the key holds now.
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

// publish puts the stored result on its subject. The message id makes a
// republish within the stream's duplicate window a no-op; after it, the new
// copy replaces the old one (MaxMsgsPerSubject 1), so a republish is always
// harmless.
func (s *Store) publish(ctx context.Context, r job.Result, data []byte) error {
	msg := nats.NewMsg(job.ResultSubject(r.Tenant, r.ID))
	msg.Data = data
	if limit := s.payloadLimit(); limit > 0 && len(data) > limit {
		// Stored larger than Record stores today (see HeaderTrimmed).
		small, _, err := fit(r, limit)
		if err != nil {
			return err
		}
		msg.Data = small
		msg.Header.Set(HeaderTrimmed, "1")
		s.log.Warn("stored result too large for NATS max_payload: published with outputs cut; Redis keeps the stored one",
			"job", r.ID, "bytes", len(data), "published_bytes", len(small))
	}
	stream := job.ResultsStream(r.Tenant)
	_, err := s.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID("result-"+r.Key()),
		jetstream.WithExpectStream(stream))
	if IsStreamFull(err) {
		s.cfg.Metrics.StreamFull(ctx, stream)
		return fmt.Errorf("%w: %s refused the result (%w): the NATS server's JetStream storage (max_file_store) or the stream's MaxBytes is used up; the result stays in Redis and is republished",
			ErrStreamFull, stream, err)
	}
	return err
}

// payloadLimit is the server's max_payload minus room for headers (0 when
// not known yet).
func (s *Store) payloadLimit() int {
	mp := s.js.Conn().MaxPayload()
	if mp <= 0 {
		return 0
	}
	return max(int(mp)-4096, 1)
}

// resultLimit is the bound Record applies: MaxResultBytes, lowered to what
// one NATS message can carry.
func (s *Store) resultLimit() int {
	limit := s.cfg.MaxResultBytes
	if pl := s.payloadLimit(); pl > 0 {
		limit = min(limit, pl)
	}
	return limit
}

// Get returns the stored result of the job with this key (job.Key), or an
// error wrapping ErrNotFound. Every Store method but Record names the job by
// its key: two tenants may use the same id.
func (s *Store) Get(ctx context.Context, key string) (job.Result, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	raw, err := s.rdb.Get(ctx, s.key("result", key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return job.Result{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return job.Result{}, fmt.Errorf("results: get %s: %w", key, err)
	}
	var r job.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return job.Result{}, fmt.Errorf("results: stored result of %s is corrupt: %w", key, err)
	}
	return r, nil
}

// BeginRun counts one more start of the job and returns the run number
// (1 for the first start): BeginRunAs with no owner (the task is the
// job's own, no active entry).
func (s *Store) BeginRun(ctx context.Context, key string) (int, error) {
	return s.BeginRunAs(ctx, key, RunOwner{})
}

// RunOwner names who starts a run: the worker (its active set,
// <prefix>active:<worker>, job key → "run|task id|queue") and the asynq
// task (its id and queue). A zero Worker writes no active entry; a zero
// TaskID is the job key (the scheduler's task).
type RunOwner struct{ Worker, TaskID, Queue string }

//go:embed beginrun.lua
var beginRunSource string

var beginRunScript = redis.NewScript(beginRunSource)

// BeginRunAs counts one more start of the job and returns the run number
// (1 for the first start), unless the task o.TaskID no longer carries the
// job: a rescuer re-enqueued it under another task id
// (<prefix>task:<key>), and then it returns ErrStaleTask and counts
// nothing. It notes the run in o.Worker's active set, which a rescuer
// reads when the worker's heartbeat is gone. The counter and the active
// set expire after the retention. It also marks the job running in the
// job index (index.go), in the same round trip; an index failure is
// logged, never returned.
func (s *Store) BeginRunAs(ctx context.Context, key string, o RunOwner) (int, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if o.TaskID == "" {
		o.TaskID = key
	}
	rk := s.key("runs", key)
	keys := []string{rk, s.key("task", key), rk, s.cfg.KeyPrefix + "active"}
	if o.Worker != "" {
		keys[2] = s.key("active", o.Worker)
	}
	var begin, idx *redis.Cmd
	iw := s.runningWrite(key) // index.go: the job is running, in the same round trip
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: inside MULTI a NOSCRIPT cannot fall back.
		begin = beginRunScript.Eval(ctx, p, keys, o.TaskID, key, s.cfg.Retention.Milliseconds(), o.Queue)
		idx = s.indexInPipe(ctx, p, iw)
		return nil
	})
	if e := begin.Err(); e != nil {
		return 0, fmt.Errorf("results: begin run %s: %w", key, e)
	}
	if err != nil && idx.Err() == nil {
		return 0, fmt.Errorf("results: begin run %s: %w", key, err)
	}
	n, _ := begin.Int()
	if n < 0 {
		return 0, fmt.Errorf("%w: %s is not the task of job %s any more", ErrStaleTask, o.TaskID, key)
	}
	s.settleIndex(ctx, idx, iw)
	return n, nil
}

// Cancel marks the job canceled (the flag expires after the retention) and
// sends a best-effort empty message on job.CancelSubject(key) so that a
// worker running the job can stop it. Whoever next handles the job (the
// scheduler before enqueueing, the worker before running) records the
// canceled result.
func (s *Store) Cancel(ctx context.Context, key string) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.rdb.Set(ctx, s.key("cancel", key), "1", s.cfg.Retention).Err(); err != nil {
		return fmt.Errorf("results: cancel %s: %w", key, err)
	}
	nc := s.js.Conn()
	err := nc.Publish(job.CancelSubject(key), nil)
	if err == nil {
		err = nc.FlushWithContext(ctx)
	}
	if err != nil {
		s.log.Warn("cancel notification not sent; the flag is set", "job", key, "err", err)
	}
	return nil
}

// Canceled reports whether Cancel was called for key within the retention.
func (s *Store) Canceled(ctx context.Context, key string) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	n, err := s.rdb.Exists(ctx, s.key("cancel", key)).Result()
	if err != nil {
		return false, fmt.Errorf("results: canceled %s: %w", key, err)
	}
	return n == 1, nil
}

// Claim makes owner the one submission allowed to schedule key (SET NX, for
// the retention). ok is true when owner holds the claim, whether this call
// or an earlier one with the same owner took it; otherwise holder names the
// submission that did. The scheduler passes a token naming the JetStream
// message, so a redelivery of the same message keeps its claim while a
// second submission with the same key (in another queue, or after the
// stream's duplicate window) is refused.
func (s *Store) Claim(ctx context.Context, key, owner string) (holder string, ok bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, holder, err = s.setNX(ctx, s.key("claim", key), owner)
	if err != nil {
		return "", false, fmt.Errorf("results: claim %s: %w", key, err)
	}
	return holder, holder == owner, nil
}

// Admit counts one job of tenant against a rate of perSecond jobs a second,
// fleet-wide (every scheduler shares the counter), and reports whether the
// job is within it. The window is the current second of the Redis clock's
// caller (a fixed window: up to 2×perSecond may pass around a window's
// edge).
func (s *Store) Admit(ctx context.Context, tenant string, perSecond int) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	key := s.key("rate", tenant+":"+strconv.FormatInt(time.Now().Unix(), 10))
	var incr *redis.IntCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, key)
		p.Expire(ctx, key, 2*time.Second)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("results: rate of %s: %w", tenant, err)
	}
	return incr.Val() <= int64(perSecond), nil
}

// Finished reports which of keys (job.Key) have a stored result, in one
// pipelined round trip.
func (s *Store) Finished(ctx context.Context, keys []string) (map[string]bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Exists(ctx, s.key("result", k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("results: finished: %w", err)
	}
	done := make(map[string]bool, len(keys))
	for i, k := range keys {
		done[k] = cmds[i].Val() == 1
	}
	return done, nil
}
