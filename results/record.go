package results

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/job"
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

// Record makes r the job's terminal result unless one is already stored:
// SET <prefix>result:<tenant>/<id> NX PX retention (r.Key()). It returns the stored result
// (r, completed with V, State and FinishedAt and bounded to MaxResultBytes,
// when first is true; the earlier one, unchanged, when first is false) and
// then always publishes the stored result on job.ResultSubject(tenant, id), so that
// calling Record again repairs a publish lost in a crash. The job index
// (index.go) takes the stored result's state, one more round trip. On a publish
// failure the error wraps ErrNotPublished (and ErrStreamFull when JetStream
// had no room) and stored/first are still valid.
//
// Record is for writers that are no run of the job (the scheduler's
// rejections and sweeps, a cancel before the job started, a republish); a
// worker ending a run it began calls RecordRun.
func (s *Store) Record(ctx context.Context, r job.Result) (stored job.Result, first bool, err error) {
	return s.record(ctx, r, RunToken{})
}

// RunToken is the fencing token of a run: the run number BeginRunAs
// returned and the asynq task id that began it (empty: the job key).
type RunToken struct {
	Run    int
	TaskID string
}

// RecordRun is Record for the result of run tok: in the same atomic step
// as the SET NX (recordrun.lua) it checks that the run is still the job's,
// that is, the task tok.TaskID still carries the job (<prefix>task:<key>;
// a rescuer moves it) and the run counter is not above tok.Run (no run
// began since; a counter lost or set back by a Redis failover is no
// evidence of one). Otherwise it writes and publishes nothing and returns
// an error wrapping ErrStaleRun. A result already stored is kept and
// republished, as Record does, whoever asks.
func (s *Store) RecordRun(ctx context.Context, r job.Result, tok RunToken) (stored job.Result, first bool, err error) {
	if tok.Run <= 0 {
		return job.Result{}, false, fmt.Errorf("%w: %s: run token without a run", ErrInvalid, r.ID)
	}
	return s.record(ctx, r, tok)
}

// ErrStaleRun is wrapped by RecordRun when the run is not the job's any
// more: it was rescued (another task carries the job) or run again. Its
// result must not be stored; the run that superseded it records its own.
var ErrStaleRun = errors.New("results: stale run")

func (s *Store) record(ctx context.Context, r job.Result, tok RunToken) (stored job.Result, first bool, err error) {
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
	var raw string
	if tok.Run > 0 {
		first, raw, err = s.setIfRun(ctx, r.Key(), string(data), tok)
	} else {
		first, raw, err = s.setNX(ctx, s.key("result", r.Key()), string(data))
	}
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

//go:embed recordrun.lua
var recordRunSource string

var recordRunScript = redis.NewScript(recordRunSource)

// setIfRun runs recordrun.lua: the SET NX of the result of key, only while
// run tok is the job's.
func (s *Store) setIfRun(ctx context.Context, key, val string, tok RunToken) (created bool, current string, err error) {
	tok.TaskID = cmp.Or(tok.TaskID, key)
	keys := []string{s.key("result", key), s.key("runs", key), s.key("task", key)}
	res, err := recordRunScript.Run(ctx, s.rdb, keys, val, s.cfg.Retention.Milliseconds(), tok.Run, tok.TaskID, key).Slice()
	if err != nil {
		return false, "", err
	}
	if len(res) != 2 {
		return false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	n, _ := res[0].(int64)
	cur, _ := res[1].(string)
	if n < 0 {
		return false, "", fmt.Errorf("%w: run %d of %s (task %s) was superseded: rescued under another task or run again", ErrStaleRun, tok.Run, key, tok.TaskID)
	}
	return n == 1, cur, nil
}

// complete validates r and fills the fields a stored result always has.
func complete(r *job.Result) error {
	r.Tenant = cmp.Or(r.Tenant, job.DefaultTenant)
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
