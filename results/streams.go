package results

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/streamfull"
	"github.com/paddockhq/paddock/job"
)

var (
	// ErrConfig is wrapped by every invalid-configuration error of this package.
	ErrConfig = errors.New("results: invalid config")
	// ErrStreamFull is wrapped (next to ErrNotPublished) when JetStream refused
	// to store a result because PADDOCK_RESULTS, or the server's JetStream
	// storage, is full. The result is in Redis; the Republisher retries.
	ErrStreamFull = errors.New("results: stream full")
)

// StreamConfig sizes the JetStream streams. A zero field takes its default.
type StreamConfig struct {
	// DedupeWindow is how long PADDOCK_JOBS remembers a Nats-Msg-Id (the job
	// id), so that a resubmission within it is dropped by the server.
	// Default 10m.
	DedupeWindow time.Duration
	// ResultRetention is how long PADDOCK_RESULTS keeps a result. Default 24h;
	// keep it equal to StoreConfig.Retention.
	ResultRetention time.Duration
	// Replicas of every stream and bucket (1, 3 or 5 in a NATS cluster of
	// at least that many JetStream servers). An existing stream or bucket
	// with another count is moved to it (JetStream adds or removes peers
	// and catches them up). 0: a new stream gets 1, an existing one keeps
	// its count, so a process started without the setting never scales a
	// clustered fleet's streams down.
	Replicas int
	// JobsMaxBytes bounds PADDOCK_JOBS, i.e. the backlog of submissions no
	// scheduler has taken yet (a submission leaves the stream once it is in
	// Redis). Default 1 GiB (DefaultJobsMaxBytes): about 4000 submissions of
	// the largest size (job.MaxSpecBytes), millions of usual ones. The stream
	// discards new messages: when it is full a submission is refused (the
	// client returns an error matching client.ErrStreamFull) and no accepted
	// submission is ever dropped.
	JobsMaxBytes int64
	// ResultsMaxBytes bounds each tenant's results stream
	// (job.ResultsStream). Default 256 MiB (DefaultResultsMaxBytes): at
	// least 256 results of the largest size (StoreConfig.MaxResultBytes),
	// tens of thousands of usual ones. The stream discards old messages:
	// when it is full the tenant's oldest results leave NATS before
	// ResultRetention (client.Get and Wait then report them not finished)
	// so that new results, which clients are waiting for, are always
	// published. Only the tenant's own results can push them out: each
	// tenant has its stream. Redis still holds every result for the
	// retention, and the fleet's own decisions (duplicate ids, cancel) read
	// Redis.
	ResultsMaxBytes int64
	// Stores sizes each tenant's live output stream and buckets
	// (EnsureTenantStores); its Retention defaults to ResultRetention.
	Stores StoreQuota
}

// Defaults of StreamConfig.
const (
	DefaultDedupeWindow    = 10 * time.Minute
	DefaultRetention       = 24 * time.Hour
	DefaultJobsMaxBytes    = 1 << 30
	DefaultResultsMaxBytes = 256 << 20
)

func (c StreamConfig) withDefaults() (StreamConfig, error) {
	if c.DedupeWindow < 0 || c.ResultRetention < 0 || c.Replicas < 0 || c.JobsMaxBytes < 0 || c.ResultsMaxBytes < 0 {
		return c, fmt.Errorf("%w: negative DedupeWindow, ResultRetention, Replicas, JobsMaxBytes or ResultsMaxBytes", ErrConfig)
	}
	c.JobsMaxBytes = cmp.Or(c.JobsMaxBytes, DefaultJobsMaxBytes)
	c.ResultsMaxBytes = cmp.Or(c.ResultsMaxBytes, DefaultResultsMaxBytes)
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	c.ResultRetention = cmp.Or(c.ResultRetention, DefaultRetention)
	return c, nil
}

// JobsStreamConfig is the stream of tenant's submissions
// (job.JobsStream(tenant)) EnsureTenantStream creates. It discards new
// messages when full (DiscardNew): a work queue must refuse a submission
// rather than silently drop one it has already acknowledged. maxQueued > 0
// is the tenant's max-queued quota: at most that many submissions wait or
// run (a message leaves the stream when its job has a result), and the
// server refuses the next publish. Each tenant's stream dedupes ids on its
// own, so no tenant can shadow another's id.
func JobsStreamConfig(cfg StreamConfig, tenant string, maxQueued int64) (jetstream.StreamConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	if err := job.CheckTenant(tenant); err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if maxQueued <= 0 {
		maxQueued = -1
	}
	return jetstream.StreamConfig{
		Name:        job.JobsStream(tenant),
		Description: "Paddock job submissions of tenant " + tenant + "; removed once the job has a result",
		Subjects:    []string{job.SubmitSubject(tenant)},
		MaxMsgs:     maxQueued,
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    cfg.JobsMaxBytes,
		Duplicates:  cfg.DedupeWindow,
		Replicas:    cfg.Replicas,
	}, nil
}

// ResultsStreamConfig is tenant's results stream (job.ResultsStream)
// EnsureTenant creates. It discards old messages when full (DiscardOld;
// see StreamConfig.ResultsMaxBytes): Redis is the record, NATS the
// delivery, and a full stream must not block the delivery of new results.
func ResultsStreamConfig(cfg StreamConfig, tenant string) (jetstream.StreamConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	if err := job.CheckTenant(tenant); err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return jetstream.StreamConfig{
		Name:              job.ResultsStream(tenant),
		Description:       "Paddock terminal results of tenant " + tenant + ": the last one per job, for the retention period",
		Subjects:          []string{job.ResultSubjects(tenant)},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Discard:           jetstream.DiscardOld,
		MaxBytes:          cfg.ResultsMaxBytes,
		MaxMsgsPerSubject: 1,
		MaxAge:            cfg.ResultRetention,
		// The server requires the duplicate window to fit in MaxAge.
		Duplicates:  min(2*time.Minute, cfg.ResultRetention),
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	}, nil
}

// EnsureStreams moves the results of the shared stream of older versions
// into the tenants' own (MigrateLegacyResults), then creates the streams
// of the default tenant (job.DefaultTenant, unlimited), or updates them to
// cfg when they exist. It is idempotent and safe to run from several
// schedulers starting at once. Other tenants' streams are made by
// EnsureTenantStream.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) error {
	if _, err := MigrateLegacyResults(ctx, js, cfg); err != nil {
		return err
	}
	return EnsureTenantStream(ctx, js, cfg, job.DefaultTenant, 0)
}

// EnsureTenantStream creates or updates tenant's stream of submissions
// (JobsStreamConfig), its results stream (ResultsStreamConfig) and its
// agent I/O stores (EnsureTenantStores with cfg.Stores). Idempotent.
func EnsureTenantStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, tenant string, maxQueued int64) error {
	return EnsureTenant(ctx, js, cfg, tenant, maxQueued, 0)
}

// EnsureTenant is EnsureTenantStream with the tenant's own size of its
// buckets, maxStored bytes (0: cfg.Stores.StoredMaxBytes). The results
// stream comes first: no submission is taken before its result has a
// stream to go to.
func EnsureTenant(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, tenant string, maxQueued, maxStored int64) error {
	rc, err := ResultsStreamConfig(cfg, tenant)
	if err != nil {
		return err
	}
	sc, err := JobsStreamConfig(cfg, tenant, maxQueued)
	if err != nil {
		return err
	}
	for _, c := range []jetstream.StreamConfig{rc, sc} {
		if err := ensureStream(ctx, js, c); err != nil {
			return err
		}
	}
	cfg, _ = cfg.withDefaults()
	q := cfg.Stores
	q.Retention = cmp.Or(q.Retention, cfg.ResultRetention)
	q.Replicas = cmp.Or(q.Replicas, cfg.Replicas)
	if maxStored > 0 {
		q.StoredMaxBytes = maxStored
	}
	return EnsureTenantStores(ctx, js, q, tenant)
}

// ensureStream is CreateOrUpdateStream made safe against a concurrent
// creator: when two processes both see "not found", one create loses with
// "name already in use" and must update instead.
//
// A stream that already has the wanted settings is left alone: every
// scheduler calls this at start, and a needless update racing a consumer
// creation trips a data race inside nats-server's file store (seen under
// -race with several schedulers starting at once).
//
// sc.Replicas 0 keeps an existing stream's count (a new one gets the
// server's default, 1).
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	if st, err := js.Stream(ctx, sc.Name); err == nil {
		have := st.CachedInfo().Config
		sc.Replicas = cmp.Or(sc.Replicas, have.Replicas)
		if sameManaged(have, sc) {
			return nil
		}
	}
	var err error
	for range 5 {
		if _, err = js.UpdateStream(ctx, sc); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			break
		}
		if _, err = js.CreateStream(ctx, sc); err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			break
		}
	}
	return fmt.Errorf("results: ensure stream %s: %w (an existing stream with an incompatible configuration, e.g. another retention policy, must be migrated or deleted by the operator)", sc.Name, err)
}

// sameManaged reports whether have already has every setting Paddock
// manages in want.
func sameManaged(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.Storage == want.Storage && have.MaxAge == want.MaxAge &&
		have.MaxMsgsPerSubject == want.MaxMsgsPerSubject && have.Duplicates == want.Duplicates &&
		have.Replicas == want.Replicas && have.AllowDirect == want.AllowDirect &&
		have.Discard == want.Discard && have.MaxMsgs == want.MaxMsgs && have.MaxBytes == want.MaxBytes
}

// IsStreamFull reports whether err is JetStream refusing a publish because
// the stream reached its MaxBytes (or MaxMsgs) with DiscardNew, or because
// the server's JetStream storage is used up. Such a publish stored nothing;
// it can succeed later, once space is freed. (client.ErrStreamFull is the
// same test on the submitting side: internal/streamfull.)
func IsStreamFull(err error) bool { return streamfull.Is(err) }

// LegacyJobsStream is the one submissions stream of fleets before tenants
// (subject paddock.jobs.submit). MigrateLegacyJobs empties it.
const LegacyJobsStream = "PADDOCK_JOBS"

// MigrateLegacyJobs moves the backlog of LegacyJobsStream, if that stream
// exists, to the default tenant's stream (the jobs of a fleet without
// tenants are the default tenant's), then deletes it. Each message keeps
// its headers (Nats-Msg-Id, trace context, Paddock-Not-Before), so a
// migration that stops half-way and runs again moves nothing twice within
// the dedupe window, and the scheduler's claim catches the rest. It returns
// how many submissions it moved.
func MigrateLegacyJobs(ctx context.Context, js jetstream.JetStream) (int, error) {
	st, err := js.Stream(ctx, LegacyJobsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("results: legacy stream %s: %w", LegacyJobsStream, err)
	}
	state := st.CachedInfo().State
	moved := 0
	for seq := state.FirstSeq; state.Msgs > 0 && seq <= state.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // acked (work queue) or deleted
		}
		if err != nil {
			return moved, fmt.Errorf("results: read %s #%d: %w", LegacyJobsStream, seq, err)
		}
		msg := nats.NewMsg(job.SubmitSubject(job.DefaultTenant))
		msg.Data, msg.Header = m.Data, m.Header
		if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(job.JobsStream(job.DefaultTenant))); err != nil {
			return moved, fmt.Errorf("results: move %s #%d: %w", LegacyJobsStream, seq, err)
		}
		moved++
	}
	if err := js.DeleteStream(ctx, LegacyJobsStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return moved, fmt.Errorf("results: delete %s after moving %d submissions: %w", LegacyJobsStream, moved, err)
	}
	return moved, nil
}
