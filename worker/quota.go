package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/job"
)

// errVolumeQuota is the cancel cause when a job's volume grows past its
// max_bytes.
var errVolumeQuota = errors.New("worker: volume over its quota")

// maxVolumeEntries bounds the entries a volume measurement visits: a
// volume with more is over any quota (a million empty files exhaust
// inodes as surely as bytes exhaust blocks).
const maxVolumeEntries = 200_000

// errUnmeasurable is wrapped when the volume cannot be measured whole: a
// volume the walk cannot see all of counts as over any quota (else a job
// would hide bytes from it).
var errUnmeasurable = errors.New("worker: volume cannot be measured")

// errTooManyEntries: the volume holds more than maxVolumeEntries entries.
var errTooManyEntries = fmt.Errorf("%w: more than %d files and directories", errUnmeasurable, maxVolumeEntries)

// volumeUsage returns the bytes the files under dir occupy on disk (their
// blocks: a sparse file counts what it really uses), walking the tree the
// job's processes wrote. The walk is relative to directory descriptors,
// opened with O_NOFOLLOW, and never follows a symlink: a box that swaps a
// directory for a link to / while it is measured only makes the open fail.
func volumeUsage(dir string) (int64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	u := &usage{}
	err = u.walk(fd, 0)
	return u.bytes, err
}

type usage struct {
	bytes   int64
	entries int
}

// walk adds the entries of the directory fd (which it closes) to u.
func (u *usage) walk(fd, depth int) error {
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	if depth > 256 {
		return fmt.Errorf("%w: directories nested more than 256 deep", errUnmeasurable)
	}
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if err := u.entry(fd, name, depth); err != nil {
				return err
			}
		}
		if err != nil {
			return nil // io.EOF, or a directory removed while read
		}
	}
}

func (u *usage) entry(dirfd int, name string, depth int) error {
	if u.entries++; u.entries > maxVolumeEntries {
		return errTooManyEntries
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil // removed meanwhile
	}
	u.bytes += st.Blocks * 512
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR:
		return nil // removed, or swapped for something else, meanwhile
	case err != nil:
		// A directory the walk cannot enter (chmod 000) would hide what it
		// holds: it counts as over quota.
		return fmt.Errorf("%w: a directory cannot be measured: %w", errUnmeasurable, err)
	}
	return u.walk(sub, depth+1)
}

// watchQuota returns a context canceled with errVolumeQuota when the
// job's volume grows past its bound, looked at every interval; stop(nil)
// ends the watch and waits for it. The bound is v.limit bytes, and a
// volume that was measurable when the job started must stay measurable.
//
// One that was not (a killed job left it nested too deep or too full to
// walk) may still be cleaned by the next job, which the walk alone could
// not tell from a job growing the part it cannot see. That job is held to
// the host filesystem instead: it is killed when the filesystem holding
// the volume has max_bytes fewer free bytes than when it started. Other
// writers on that filesystem count too, so such a job may be stopped
// early, never late.
func watchQuota(ctx context.Context, v *volumeRun, interval time.Duration) (_ context.Context, stop context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if v.over() {
				cancel(errVolumeQuota)
				return
			}
		}
	}()
	return ctx, func(cause error) {
		cancel(cause)
		<-done
	}
}

// over tells whether the volume is past the job's bound now.
func (v *volumeRun) over() bool {
	n, err := volumeUsage(v.dir)
	if n > v.limit {
		return true
	}
	if !errors.Is(err, errUnmeasurable) {
		return false
	}
	if !v.unmeasured {
		return true
	}
	free, ferr := freeBytes(v.dir)
	return ferr != nil || v.free-free > v.maxBytes
}

// freeBytes is what the filesystem holding dir has free.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bfree) * st.Bsize, nil
}

// volumeRun is what a job's volume needs when the job ends.
type volumeRun struct {
	dir      string
	maxBytes int64 // the job's volume.max_bytes (0: none)
	start    int64 // its size when the job started
	limit    int64 // what the watch kills at: max(maxBytes, start)
	delete   bool
	// unmeasured: the volume could not be measured whole when the job
	// started; free is then its filesystem's free bytes at that time.
	unmeasured bool
	free       int64
	// fs: the volume is a filesystem of its own (QuotaKernel) whose wall
	// is limit: the kernel refuses a write past it (ENOSPC), so no watch
	// kills the job; full is set when a look found it at its wall (less
	// than slack bytes of room left).
	fs    bool
	mnt   string // where the worker sees the whole filesystem (volfs.go)
	slack int64
	full  atomic.Bool
}

// watchFull looks at the job's volume filesystem every interval and notes
// when it is full, for settleVolume to name the reason; stop(nil) ends
// the watch and waits for it.
func watchFull(ctx context.Context, v *volumeRun, interval time.Duration) (_ context.Context, stop context.CancelCauseFunc) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for !v.full.Load() {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if sp, err := spaceOf(v.mnt); err == nil && sp.avail < v.slack {
				v.full.Store(true)
			}
		}
	}()
	return ctx, func(cause error) {
		cancel(cause)
		<-done
	}
}

// enospc is how the C library words ENOSPC, as a failed command prints it.
const enospc = "No space left on device"

// settleFS measures a volume filesystem for the result, and makes a job
// that failed with the volume at its wall fsize: full at a look, full now,
// or a command that said ENOSPC (the job's own stderr: a job can only
// mislabel its own failure).
func (w *Worker) settleFS(ctx context.Context, r *jobRun, reason job.Reason) job.Reason {
	v := r.vol
	sp, err := spaceOf(v.mnt)
	if err != nil {
		r.log.WarnContext(ctx, "volume not measured", "err", err)
		return reason
	}
	r.res.VolumeBytes = sp.used
	full := v.full.Load() || sp.avail < v.slack || strings.Contains(r.res.Stderr.Text+r.res.Stderr.Tail, enospc)
	if !full || reason != job.ReasonExitNonzero {
		return reason
	}
	markLast(&r.res, job.ReasonFsize)
	r.res.Error = joinMsg(r.res.Error, fmt.Sprintf("the workspace reached its quota of %d bytes (%d used) and the kernel refused further writes (ENOSPC); remove files from /workspace or write less", v.limit, sp.used))
	return job.ReasonFsize
}

// settleVolume runs just before the job's result is recorded, and
// returns the reason to record: a volume asked to be deleted is deleted,
// once the job's container is gone (the lock is still held), and a volume
// with a quota is measured for the result. A deletion that fails makes the
// job infra (the caller retries it); a volume left over its quota by a job
// that ended between two looks makes it fsize (the files stay, but the
// next job starts over quota and may only shrink the volume).
func (w *Worker) settleVolume(ctx context.Context, r *jobRun, reason job.Reason) job.Reason {
	v := r.vol
	if v == nil {
		return reason
	}
	if v.delete {
		return w.deleteVolume(ctx, r, reason)
	}
	if v.fs {
		return w.settleFS(ctx, r, reason)
	}
	if v.maxBytes == 0 {
		return reason
	}
	n, err := volumeUsage(v.dir)
	r.res.VolumeBytes = n
	over := n > v.limit || errors.Is(err, errUnmeasurable)
	if over && (reason == job.ReasonOK || reason == job.ReasonExitNonzero) {
		markLast(&r.res, job.ReasonFsize)
		r.res.Error = joinMsg(r.res.Error, fmt.Sprintf("the job left the workspace over its quota of %d bytes (%d used); remove files from /workspace (the next job may only shrink it)", v.limit, n))
		return job.ReasonFsize
	}
	if err != nil && !errors.Is(err, errUnmeasurable) {
		r.log.WarnContext(ctx, "volume not measured", "err", err)
	}
	return reason
}

// deleteVolume deletes the job's volume directory after its container is
// confirmed gone, unless the lease was lost (another job may hold it now).
func (w *Worker) deleteVolume(ctx context.Context, r *jobRun, reason job.Reason) job.Reason {
	if reason == job.ReasonLeaseLost {
		r.res.Error = joinMsg(r.res.Error, "the volume was not deleted: its lease was lost, so another job may be using it; submit the delete again")
		return reason
	}
	if r.sess != nil {
		dctx, cancel := detached(ctx)
		err := r.sess.Destroy(dctx)
		cancel()
		if err != nil {
			r.log.ErrorContext(ctx, "volume not deleted: its container may still run", "err", err)
			r.res.Error = joinMsg(r.res.Error, "the volume was not deleted: its container could not be confirmed gone; submit the delete again")
			return job.ReasonInfra
		}
	}
	if err := w.removeVolume(ctx, r); err != nil {
		r.log.ErrorContext(ctx, "volume not deleted", "dir", r.vol.dir, "err", err)
		// The error names host paths: the tenant is told the reason only.
		why := err.Error()
		var pe *os.PathError
		if errors.As(err, &pe) {
			why = pe.Err.Error()
		}
		r.res.Error = joinMsg(r.res.Error, "the volume was not completely deleted ("+why+"); submit the delete again")
		return job.ReasonInfra
	}
	return reason
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// removeVolume removes the job's volume: its filesystem (unmounted, the
// image removed, under the filesystem's lock), then its directory.
func (w *Worker) removeVolume(ctx context.Context, r *jobRun) error {
	if w.vfs != nil {
		name := VolumeName(r.spec)
		unlock, err := w.vfs.lock(context.WithoutCancel(ctx), name)
		if err != nil {
			return err
		}
		err = w.vfs.remove(name, r.vol.dir)
		unlock()
		if err != nil {
			return err
		}
	}
	return os.RemoveAll(r.vol.dir)
}
