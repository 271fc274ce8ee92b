package results

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// StoreQuota sizes one tenant's agent I/O storage. A zero field takes its
// default.
type StoreQuota struct {
	// OutputMaxBytes bounds the tenant's live output stream
	// (job.OutputStream), which keeps chunks for OutputRetention and drops
	// the oldest when full: it is for following jobs, the full copy is in
	// the output bucket. Default 64 MiB.
	OutputMaxBytes int64
	// OutputRetention is how long live chunks stay. Default 1h.
	OutputRetention time.Duration
	// StoredMaxBytes bounds each of the tenant's buckets (job.OutBucket,
	// job.InBucket): the tenant's quota of kept output and artifacts, and of
	// uploads. A full bucket refuses new objects (a job's output is then
	// "not kept", with a note; an upload fails). Default 1 GiB.
	//
	// JetStream reserves every stream's MaxBytes against the server's
	// max_file_store when the stream is made: a tenant reserves its jobs
	// stream (1 GiB), the live output stream and both buckets, about 3 GiB
	// with the defaults. Size max_file_store for the tenants you add.
	StoredMaxBytes int64
	// Retention is the TTL of the buckets' objects; keep it equal to the
	// result retention so objects expire with the result naming them.
	// Default DefaultRetention (24h).
	Retention time.Duration
	// Replicas of the stream and buckets; 0 as in StreamConfig.Replicas
	// (new: 1, existing: kept).
	Replicas int
}

// Defaults of StoreQuota.
const (
	DefaultOutputMaxBytes  = 64 << 20
	DefaultOutputRetention = time.Hour
	DefaultStoredMaxBytes  = 1 << 30
)

func (q StoreQuota) withDefaults() (StoreQuota, error) {
	if q.OutputMaxBytes < 0 || q.OutputRetention < 0 || q.StoredMaxBytes < 0 || q.Retention < 0 || q.Replicas < 0 {
		return q, fmt.Errorf("%w: negative store quota", ErrConfig)
	}
	q.OutputMaxBytes = cmp.Or(q.OutputMaxBytes, DefaultOutputMaxBytes)
	q.OutputRetention = cmp.Or(q.OutputRetention, DefaultOutputRetention)
	q.StoredMaxBytes = cmp.Or(q.StoredMaxBytes, DefaultStoredMaxBytes)
	q.Retention = cmp.Or(q.Retention, DefaultRetention)
	return q, nil
}

// OutputStreamConfig is tenant's live output stream.
func OutputStreamConfig(q StoreQuota, tenant string) (jetstream.StreamConfig, error) {
	q, err := q.withDefaults()
	if err != nil {
		return jetstream.StreamConfig{}, err
	}
	if err := job.CheckTenant(tenant); err != nil {
		return jetstream.StreamConfig{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return jetstream.StreamConfig{
		Name:        job.OutputStream(tenant),
		Description: "Paddock live output of tenant " + tenant + "'s jobs (short retention; kept output is in " + job.OutBucket(tenant) + ")",
		Subjects:    []string{job.OutputSubjects(tenant)},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		MaxBytes:    q.OutputMaxBytes,
		MaxAge:      q.OutputRetention,
		Duplicates:  min(time.Minute, q.OutputRetention),
		Replicas:    q.Replicas,
		AllowDirect: true,
	}, nil
}

// bucketConfig is one of tenant's Object Store buckets.
func bucketConfig(q StoreQuota, bucket, what string) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: what,
		TTL:         q.Retention,
		MaxBytes:    q.StoredMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    q.Replicas,
	}
}

// EnsureTenantStores creates tenant's live output stream and its output
// and input buckets when they are missing, and updates them when their
// sizes differ from q. Idempotent; a store with the wanted settings is left
// alone (see ensureStream).
func EnsureTenantStores(ctx context.Context, js jetstream.JetStream, q StoreQuota, tenant string) error {
	sc, err := OutputStreamConfig(q, tenant)
	if err != nil {
		return err
	}
	if err := ensureStream(ctx, js, sc); err != nil {
		return err
	}
	q, _ = q.withDefaults()
	for _, b := range []jetstream.ObjectStoreConfig{
		bucketConfig(q, job.OutBucket(tenant), "Paddock kept output and artifacts of tenant "+tenant),
		bucketConfig(q, job.InBucket(tenant), "Paddock input files tenant "+tenant+" uploaded"),
	} {
		if err := ensureBucket(ctx, js, b); err != nil {
			return err
		}
	}
	return nil
}

// ensureBucket creates bucket b, or updates it when its TTL, size or
// replicas (b.Replicas > 0) differ.
func ensureBucket(ctx context.Context, js jetstream.JetStream, b jetstream.ObjectStoreConfig) error {
	if st, err := js.Stream(ctx, "OBJ_"+b.Bucket); err == nil {
		c := st.CachedInfo().Config
		if b.Replicas == 0 {
			b.Replicas = c.Replicas // an update must not scale it down to 1
		}
		if c.MaxAge == b.TTL && c.MaxBytes == b.MaxBytes && c.Replicas == b.Replicas {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("results: bucket %s: %w", b.Bucket, err)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, b); err != nil {
		return fmt.Errorf("results: ensure bucket %s: %w", b.Bucket, err)
	}
	return nil
}
