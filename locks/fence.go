package locks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// A fence file records the highest fencing token that storage has accepted:
// one decimal number, zero-padded to a fixed width so that every update is a
// single in-place write of the same size (no truncation, so no instant at
// which the file is empty). It is read and updated only under an exclusive
// flock of the file itself.
const fenceRecordLen = 21 // 20 digits hold any int64, plus "\n"

// FencedWrite runs write, the storage's write on behalf of the holder of
// token, only if token is not lower than the highest token recorded in the
// fence file at path (created if missing). It records token first (fsync'd),
// then runs write, all under an exclusive flock of the fence file, so a
// stale holder cannot slip a write in between the check and the write of a
// newer one. write may be nil (see CheckAndRecord).
//
// A lower token returns a *StaleTokenError wrapping ErrStaleToken and write
// does not run: a newer holder owns the storage. An equal token is accepted:
// one holder writes many times. ctx bounds the wait for the fence lock
// (default DefaultFileTimeout).
func FencedWrite(ctx context.Context, path string, token int64, write func() error) error {
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d must be positive", ErrInvalid, token)
	}
	fl, err := AcquireFile(ctx, path, FileOptions{})
	if err != nil {
		return err
	}
	defer fl.Release()
	highest, err := readFence(fl.f, path)
	if err != nil {
		return err
	}
	if token < highest {
		return &StaleTokenError{Token: token, Highest: highest, Path: path}
	}
	if token > highest {
		if err := writeFence(fl.f, token); err != nil {
			return fmt.Errorf("locks: record fencing token in %s: %w", path, err)
		}
	}
	if write == nil {
		return nil
	}
	return write()
}

// CheckAndRecord rejects token with a *StaleTokenError if the fence file at
// path has seen a higher one, and records it otherwise. Checking alone does
// not fence a later write: use FencedWrite to run the write under the same
// lock, unless every writer of the storage goes through this check and
// writes only under a lock that excludes the others.
func CheckAndRecord(ctx context.Context, path string, token int64) error {
	return FencedWrite(ctx, path, token, nil)
}

// ReadFence returns the highest token recorded in the fence file at path, 0
// if there is none yet. It reads under a shared flock.
func ReadFence(ctx context.Context, path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("locks: open fence file: %w", err)
	}
	defer f.Close()
	if _, err := lockFile(ctx, f, path, unix.LOCK_SH, 0); err != nil {
		return 0, err
	}
	return readFence(f, path)
}

// fenceHint reads the fence file at path without locking it, for a floor
// of the fencing counter: a torn or missing record reads as 0, which only
// makes the floor useless, never wrong. It must not wait behind a fenced
// write in progress, whose writer may be paused with the lock.
func fenceHint(path string) int64 {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	v, err := readFence(f, path)
	if err != nil {
		return 0
	}
	return v
}

func readFence(f *os.File, path string) (int64, error) {
	buf := make([]byte, 2*fenceRecordLen)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("locks: read fence file %s: %w", path, err)
	}
	s := bytes.TrimSpace(buf[:n])
	if len(s) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("locks: fence file %s is corrupt (%q): refusing to guess its highest token", path, s)
	}
	return v, nil
}

func writeFence(f *os.File, token int64) error {
	rec := fmt.Appendf(nil, "%020d\n", token)
	if _, err := f.WriteAt(rec, 0); err != nil {
		return err
	}
	// Only longer foreign content can follow the record; we hold the lock,
	// so cutting it is safe.
	if err := f.Truncate(int64(len(rec))); err != nil {
		return err
	}
	return f.Sync()
}
