package locks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// NoWait as FileOptions.Timeout makes AcquireFile try exactly once.
const NoWait time.Duration = -1

// Defaults of FileOptions.
const (
	DefaultFileTimeout             = 30 * time.Second
	DefaultFilePerm    os.FileMode = 0o600
)

// FileOptions tune AcquireFile; the zero value takes an exclusive lock,
// waiting up to DefaultFileTimeout.
type FileOptions struct {
	// Shared takes LOCK_SH (any number of shared holders, no exclusive one)
	// instead of LOCK_EX.
	Shared bool

	// Timeout bounds the wait: 0 means DefaultFileTimeout, NoWait (any
	// negative value) a single attempt. The caller's context can end it
	// sooner.
	Timeout time.Duration

	// Perm is the mode a missing lock file is created with (before umask);
	// 0 means DefaultFilePerm, 0600. Reading a file is enough to flock it,
	// so a lock file readable by other users lets them block its writers:
	// only the fleet's own user should be able to open it.
	Perm os.FileMode
}

// FileLock is a held flock(2) lock. The kernel drops it when the holding
// process dies, however it dies.
type FileLock struct {
	f      *os.File
	path   string
	waited time.Duration

	once sync.Once
	err  error
}

// AcquireFile opens (creating if missing, never truncating) the lock file at
// path and takes an exclusive, or with opts.Shared a shared, flock on it. It
// polls with LOCK_NB and a jittered backoff (5 ms doubling to 100 ms) until it
// holds the lock, opts.Timeout has passed, or ctx ends; the last two return a
// *TimeoutError wrapping ErrNotObtained.
//
// The file is opened O_RDWR|O_CREATE|O_NOFOLLOW|O_CLOEXEC: its content is
// never touched (a lock file may carry data of its own), a symlink planted at
// path is refused rather than followed, and the descriptor is not inherited
// by child processes, which could otherwise keep the lock after we die.
func AcquireFile(ctx context.Context, path string, opts FileOptions) (*FileLock, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty lock file path", ErrInvalid)
	}
	if opts.Perm == 0 {
		opts.Perm = DefaultFilePerm
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, opts.Perm)
	if err != nil {
		return nil, fmt.Errorf("locks: open lock file: %w", err)
	}
	how := unix.LOCK_EX
	if opts.Shared {
		how = unix.LOCK_SH
	}
	waited, err := lockFile(ctx, f, path, how, opts.Timeout)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &FileLock{f: f, path: path, waited: waited}, nil
}

// lockFile polls flock(how|LOCK_NB) on f as AcquireFile describes.
func lockFile(ctx context.Context, f *os.File, path string, how int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	switch {
	case timeout == 0:
		timeout = DefaultFileTimeout
	case timeout < 0:
		timeout = 0
	}
	deadline := start.Add(timeout)
	poll := newBackoff(defaultPollMin, defaultPollMax)
	for {
		if err := ctx.Err(); err != nil {
			return 0, &TimeoutError{Lock: "flock", Name: path, Waited: time.Since(start), Cause: err}
		}
		err := flock(f, how|unix.LOCK_NB)
		if err == nil {
			return time.Since(start), nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("locks: flock %s: %w", path, err)
		}
		now := time.Now()
		if !now.Before(deadline) {
			return 0, &TimeoutError{Lock: "flock", Name: path, Waited: now.Sub(start)}
		}
		if err := sleep(ctx, min(poll.next(), deadline.Sub(now))); err != nil {
			return 0, &TimeoutError{Lock: "flock", Name: path, Waited: time.Since(start), Cause: err}
		}
	}
}

// flock calls flock(2) through the file's raw connection, so that the
// *os.File keeps owning (and later closes) the descriptor.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), how) }); err != nil {
		return err
	}
	return ferr
}

// Path returns the lock file's path.
func (l *FileLock) Path() string { return l.path }

// Waited returns how long AcquireFile waited for the lock.
func (l *FileLock) Waited() time.Duration { return l.waited }

// Release unlocks and closes the lock file. It is idempotent: later calls
// return the first call's result.
func (l *FileLock) Release() error {
	l.once.Do(func() {
		// Closing the last descriptor drops the lock anyway; unlocking first
		// makes the release explicit and independent of any dup'ed descriptor.
		l.err = errors.Join(flock(l.f, unix.LOCK_UN), l.f.Close())
		if l.err != nil {
			l.err = fmt.Errorf("locks: release flock %s: %w", l.path, l.err)
		}
	})
	return l.err
}
