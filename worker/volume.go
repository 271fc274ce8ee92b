package worker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/sandbox"
)

// VolumeGuard takes a shared volume for a job (locks.Guard).
type VolumeGuard interface {
	Acquire(ctx context.Context, name string, mode locks.Mode) (*locks.Held, error)
}

// errLeaseLost is the cancel cause when a job's volume lease is lost.
var errLeaseLost = errors.New("worker: volume lease lost")

// VolumeName is the name of the job's volume on the volume root and in the
// lock service: "<tenant>.<name>". Volume names are per tenant: tenant a's
// "cache" and tenant b's "cache" are two directories, and no spec can name
// another tenant's (a tenant name holds no '.', so the prefix is never
// ambiguous).
func VolumeName(s job.Spec) string {
	t := s.Tenant
	if t == "" {
		t = job.DefaultTenant
	}
	return t + "." + s.Volume.Name
}

// withVolume calls run with the job's shared volume, if it asked for one:
// lease, then flock, then mount. A lost lease ends the run as lease_lost;
// run destroys the container (synchronously) before the lock is released
// here, so no two jobs ever write the volume at once. docs/locks.md.
func (w *Worker) withVolume(ctx context.Context, r *jobRun, run func(context.Context, *jobRun) error) error {
	v := r.spec.Volume
	if v == nil {
		return run(ctx, r)
	}
	if w.cfg.Volumes == nil {
		return w.finish(ctx, r, job.ReasonRejected, "this worker has no volume root; the job asked for volume "+v.Name)
	}
	mode := locks.RW
	if v.Mode == job.VolumeRO {
		mode = locks.RO
	}
	held, err := w.lockVolume(ctx, VolumeName(r.spec), mode)
	if err != nil {
		return w.infraFail(ctx, r, err)
	}
	defer held.Release()
	r.res.LockWaitMS = held.Waited().Milliseconds()
	r.profile.Mounts = []sandbox.Mount{{Source: held.Dir(), Target: sandbox.WorkspaceDir, ReadOnly: mode == locks.RO}}
	r.vol = &volumeRun{dir: held.Dir(), maxBytes: v.MaxBytes, delete: v.Delete}
	if mode == locks.RW {
		r.res.FencingToken = held.FencingToken()
		r.env[job.EnvFencingToken] = strconv.FormatInt(held.FencingToken(), 10)
		var stop context.CancelCauseFunc
		ctx, stop = w.watchLease(ctx, r.log, held, v.Name)
		defer stop(nil)
		if v.MaxBytes > 0 {
			ctx, stop = w.watchVolumeQuota(ctx, r)
			defer stop(nil)
		}
	}
	return run(ctx, r)
}

// lockVolume waits for the volume's lease and lock; a retryable failure
// becomes a retryable *sandbox.InfraError, for the queue to retry.
func (w *Worker) lockVolume(ctx context.Context, name string, mode locks.Mode) (*locks.Held, error) {
	lctx, lspan := w.tr.Start(ctx, "paddock.lock.wait", trace.WithAttributes(
		attribute.String(job.AttrVolume, name), attribute.String(job.AttrVolumeMode, mode.String())))
	held, err := w.cfg.Volumes.Acquire(lctx, name, mode)
	endSpan(lspan, err)
	if held != nil {
		w.m.LeaseWait(ctx, held.Waited(), true)
	} else {
		w.m.LeaseWait(ctx, 0, false)
	}
	if err != nil && locks.Retryable(err) {
		err = &sandbox.InfraError{Op: "lock volume " + name, Err: err, Retryable: true}
	}
	return held, err
}

// watchLease returns a context that is canceled with errLeaseLost when
// held's lease is lost, which kills the job; stop(nil) ends the watch.
func (w *Worker) watchLease(ctx context.Context, log *slog.Logger, held *locks.Held, name string) (_ context.Context, stop context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-held.Lost():
			log.WarnContext(ctx, "volume lease lost; killing the job", "volume", name, "err", held.Err())
			w.m.LeaseLost(context.WithoutCancel(ctx))
			cancel(errLeaseLost)
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// watchVolumeQuota starts the watch of the job's volume quota: the job
// may not grow the volume past max(max_bytes, its size now), so a job
// over quota can still shrink it (watchQuota).
func (w *Worker) watchVolumeQuota(ctx context.Context, r *jobRun) (context.Context, context.CancelCauseFunc) {
	start, err := volumeUsage(r.vol.dir)
	if errors.Is(err, errUnmeasurable) {
		// Without the filesystem's free bytes, the walk alone decides.
		free, ferr := freeBytes(r.vol.dir)
		r.vol.unmeasured, r.vol.free = ferr == nil, free
	}
	if err != nil {
		r.log.WarnContext(ctx, "volume not measured at start", "err", err)
	}
	r.vol.start, r.vol.limit = start, max(r.vol.maxBytes, start)
	return watchQuota(ctx, r.vol, w.cfg.VolumeQuotaInterval)
}
