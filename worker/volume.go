package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/sandbox"
)

// VolumeGuard takes a shared volume for a job (*locks.Guard, through
// LockGuard). A guard that also has Root() string names the volume root
// (the quota filesystem mounts there).
type VolumeGuard interface {
	Acquire(ctx context.Context, name string, mode locks.Mode) (Lease, error)
}

// Lease is a volume held for one job (*locks.Held): its directory and
// fencing token, how long it was waited for, and Lost, closed when the
// lease is lost (Err says why).
type Lease interface {
	Dir() string
	FencingToken() int64
	Waited() time.Duration
	Lost() <-chan struct{}
	Err() error
	Release() error
}

// LockGuard is g as a VolumeGuard (nil stays nil).
func LockGuard(g *locks.Guard) VolumeGuard {
	if g == nil {
		return nil
	}
	return lockGuard{g}
}

type lockGuard struct{ *locks.Guard }

func (g lockGuard) Acquire(ctx context.Context, name string, mode locks.Mode) (Lease, error) {
	held, err := g.Guard.Acquire(ctx, name, mode)
	if held == nil {
		return nil, err
	}
	return held, err
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
	t = cmp.Or(t, job.DefaultTenant)
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
	if msg := w.refuseVolume(v, mode); msg != "" {
		return w.finish(ctx, r, job.ReasonRejected, msg)
	}
	held, err := w.lockVolume(ctx, VolumeName(r.spec), mode)
	if err != nil {
		return w.infraFail(ctx, r, err)
	}
	defer held.Release()
	r.res.LockWaitMS = held.Waited().Milliseconds()
	r.profile.Mounts = []sandbox.Mount{{Source: held.Dir(), Target: sandbox.WorkspaceDir, ReadOnly: mode == locks.RO}}
	r.vol = &volumeRun{dir: held.Dir(), maxBytes: v.MaxBytes, delete: v.Delete}
	if err := w.mountVolume(ctx, r, VolumeName(r.spec), mode); err != nil {
		// The error names host paths: the tenant is told the reason only.
		var tooMany *TooManyVolumesError
		if errors.As(err, &tooMany) {
			return w.finish(ctx, r, job.ReasonRejected, tooMany.Error())
		}
		r.log.ErrorContext(ctx, "volume filesystem not mounted", "err", err)
		if !errors.Is(err, ErrVolumeNotEmpty) {
			err = errVolumeMount
		}
		return w.infraFail(ctx, r, err)
	}
	if mode == locks.RW {
		r.res.FencingToken = held.FencingToken()
		r.env[job.EnvFencingToken] = strconv.FormatInt(held.FencingToken(), 10)
		var stop context.CancelCauseFunc
		ctx, stop = w.watchLease(ctx, r.log, held, v.Name)
		defer stop(nil)
		if r.vol.fs {
			ctx, stop = watchFull(ctx, r.vol, w.cfg.VolumeQuotaInterval)
			defer stop(nil)
		} else if v.MaxBytes > 0 {
			ctx, stop = w.watchVolumeQuota(ctx, r)
			defer stop(nil)
		}
	}
	return run(ctx, r)
}

// errVolumeMount is a job's answer when its volume's filesystem could
// not be mounted (the worker's log has why).
var errVolumeMount = errors.New("worker: the volume's filesystem could not be made or mounted (the worker's log says why)")

// startVolumeFS readies kernel quotas (QuotaKernel on a worker with a
// volume root): it mounts a probe filesystem, and says loudly when it
// cannot; the error is then every rw volume job's answer.
func startVolumeFS(cfg Config) (*volumeFS, error) {
	rooted, ok := cfg.Volumes.(interface{ Root() string })
	if cfg.Volumes == nil || cfg.VolumeQuota != QuotaKernel || cfg.NoopExecutor {
		if cfg.Volumes != nil && cfg.VolumeQuota == QuotaWalk {
			cfg.Logger.Warn("volume quotas are measured by walking the volume (--volume-quota=walk): a job can step around them (a file deleted while open is not seen) and fill the host's disk up to what fsize and its file count allow")
		}
		return nil, nil
	}
	if !ok {
		return nil, &QuotaUnavailableError{Err: errors.New("the volume guard does not tell its root")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := newVolumeFS(rooted.Root())
	if err == nil {
		f.maxPerTenant = cfg.MaxVolumesPerTenant
		err = f.probe(ctx)
	}
	if err != nil {
		err = &QuotaUnavailableError{Root: rooted.Root(), Err: err}
		cfg.Logger.Error("VOLUME QUOTAS UNAVAILABLE: this worker refuses every job that writes to a volume", "err", err)
		return nil, err
	}
	return f, nil
}

// refuseVolume says why this worker refuses the job's volume, or "".
func (w *Worker) refuseVolume(v *job.Volume, mode locks.Mode) string {
	if w.cfg.VolumeQuota != QuotaKernel || mode != locks.RW {
		return ""
	}
	if w.vfsErr != nil {
		// The error names host paths: the tenant is told the reason only.
		return "this worker cannot hold volumes to a byte quota (its operator must give it loop mounts, or choose --volume-quota=walk); it refuses jobs that write to a volume"
	}
	if v.MaxBytes > w.cfg.VolumeMaxBytes {
		return fmt.Sprintf("volume.max_bytes %d is over this worker's cap of %d bytes", v.MaxBytes, w.cfg.VolumeMaxBytes)
	}
	return ""
}

// mountVolume gives the job's volume its filesystem (QuotaKernel), under
// that filesystem's lock: made and mounted if it is not, and, for a rw
// job, its wall set to the job's bound: max(max_bytes, or the worker's
// VolumeMaxBytes without one, what the volume holds now), so a volume over
// its bound may only shrink.
func (w *Worker) mountVolume(ctx context.Context, r *jobRun, name string, mode locks.Mode) error {
	if w.vfs == nil {
		return nil
	}
	unlock, err := w.vfs.lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	v := r.vol
	bound := cmp.Or(v.maxBytes, w.cfg.VolumeMaxBytes)
	// Every image is made to hold the worker's cap, whatever the job's
	// bound (it is sparse: the host holds only what is written), so a
	// later job's higher bound needs no resize.
	mounted, err := w.vfs.ensure(ctx, name, v.dir, imageSize(w.cfg.VolumeMaxBytes), mode == locks.RW)
	if err != nil || !mounted || mode != locks.RW {
		return err
	}
	v.mnt = w.vfs.mnt(name)
	sp, err := spaceOf(v.mnt)
	if err == nil {
		v.start, v.limit = sp.used, max(bound, sp.used)
		sp, v.limit, err = setWall(ctx, w.vfs.image(name), v.mnt, v.limit)
	}
	if errors.Is(err, errNoGrow) {
		r.log.WarnContext(ctx, "the volume's image is smaller than the job's bound (made under a lower --volume-max-mb) and cannot grow online: the job gets what it holds", "volume", name, "wall", v.limit, "err", err)
		err = nil
	}
	if err != nil {
		return err
	}
	v.fs, v.slack = true, wallSlack(sp)
	r.log.DebugContext(ctx, "volume filesystem", "volume", name, "used", sp.used, "room", sp.avail, "wall", v.limit)
	return nil
}

// lockVolume waits for the volume's lease and lock; a retryable failure
// becomes a retryable *sandbox.InfraError, for the queue to retry.
func (w *Worker) lockVolume(ctx context.Context, name string, mode locks.Mode) (Lease, error) {
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
func (w *Worker) watchLease(ctx context.Context, log *slog.Logger, held Lease, name string) (_ context.Context, stop context.CancelCauseFunc) {
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
