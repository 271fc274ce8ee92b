package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// checkStores refuses, at the edge, a job whose agent I/O cannot work: an
// input file by ref that is not in the tenant's input bucket, or kept
// output or artifacts while the tenant's output bucket is full (its
// stored-bytes quota). It returns a *job.ValidationError for the job, or
// an error of NATS (retried).
func (s *Scheduler) checkStores(ctx context.Context, spec job.Spec) (bad, err error) {
	var fields []job.FieldError
	if refs := hasRefs(spec); refs {
		in, err := s.inBucket(ctx, spec.Tenant)
		if err != nil {
			return nil, fmt.Errorf("scheduler: input bucket of %s: %w", spec.Tenant, err)
		}
		for i, f := range spec.Files {
			if f.Ref == "" {
				continue
			}
			if _, err := in.GetInfo(ctx, f.Ref); errors.Is(err, jetstream.ErrObjectNotFound) {
				fields = append(fields, job.FieldError{Field: fmt.Sprintf("files[%d].ref", i),
					Message: fmt.Sprintf("%q is not in your input bucket %s; upload it first (`paddock put`), objects expire after the retention", f.Ref, job.InBucket(spec.Tenant))})
			} else if err != nil {
				return nil, fmt.Errorf("scheduler: input %q: %w", f.Ref, err)
			}
		}
	}
	if job.KeepOutput(&spec, s.cfg.Caps) || len(spec.Artifacts) > 0 {
		st, err := s.js.Stream(ctx, "OBJ_"+job.OutBucket(spec.Tenant))
		if err != nil {
			return nil, fmt.Errorf("scheduler: output bucket of %s: %w", spec.Tenant, err)
		}
		info := st.CachedInfo()
		if mx := info.Config.MaxBytes; mx > 0 && int64(info.State.Bytes) >= mx-mx/100 {
			field := "artifacts"
			if job.KeepOutput(&spec, s.cfg.Caps) {
				field = "output.keep"
			}
			fields = append(fields, job.FieldError{Field: field, Message: fmt.Sprintf(
				"your output bucket %s is full (%d of %d bytes, your stored-bytes quota): delete old objects, wait for them to expire, or ask the operator for more", job.OutBucket(spec.Tenant), info.State.Bytes, mx)})
		}
	}
	if len(fields) > 0 {
		return &job.ValidationError{Fields: fields}, nil
	}
	return nil, nil
}

func hasRefs(spec job.Spec) bool {
	for _, f := range spec.Files {
		if f.Ref != "" {
			return true
		}
	}
	return false
}

// inBucket is tenant's input bucket, looked up once (a lookup is a
// round trip to the server; submissions with files by ref need it each).
func (s *Scheduler) inBucket(ctx context.Context, tenant string) (jetstream.ObjectStore, error) {
	if b, ok := s.inBuckets.Load(tenant); ok {
		return b.(jetstream.ObjectStore), nil
	}
	b, err := s.js.ObjectStore(ctx, job.InBucket(tenant))
	if err != nil {
		return nil, err
	}
	s.inBuckets.Store(tenant, b)
	return b, nil
}
