package locks_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/locks"
)

// flock locks belong to open file descriptions, so two AcquireFile calls in
// one process contend exactly as two processes would.

func TestAcquireFileExclusive(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	ctx := context.Background()

	l1, err := locks.AcquireFile(ctx, path, locks.FileOptions{})
	require.NoError(t, err)
	assert.Equal(t, path, l1.Path())

	_, err = locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: 50 * time.Millisecond})
	require.ErrorIs(t, err, locks.ErrNotObtained)
	var te *locks.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "flock", te.Lock)
	assert.Equal(t, path, te.Name)
	assert.GreaterOrEqual(t, te.Waited, 50*time.Millisecond)
	assert.Nil(t, te.Cause)
	assert.Contains(t, err.Error(), path)
	assert.True(t, locks.Retryable(err))

	_, err = locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: locks.NoWait})
	require.ErrorIs(t, err, locks.ErrNotObtained)

	require.NoError(t, l1.Release())
	l2, err := locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: locks.NoWait})
	require.NoError(t, err)
	require.NoError(t, l2.Release())
}

func TestAcquireFileWaitsForRelease(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	l1, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.NoError(t, err)

	// Released once the second AcquireFile polls again (it was refused):
	// it really waits for the release, and then gets the lock.
	ctx := newPollSignal(context.Background())
	released := make(chan struct{})
	go func() {
		<-ctx.polled
		assert.NoError(t, l1.Release())
		close(released)
	}()
	l2, err := locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: time.Minute})
	require.NoError(t, err)
	<-released
	assert.Greater(t, l2.Waited(), time.Duration(0))
	require.NoError(t, l2.Release())
}

func TestAcquireFileShared(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	ctx := context.Background()
	sh := locks.FileOptions{Shared: true, Timeout: locks.NoWait}

	r1, err := locks.AcquireFile(ctx, path, sh)
	require.NoError(t, err)
	r2, err := locks.AcquireFile(ctx, path, sh)
	require.NoError(t, err, "shared locks coexist")

	_, err = locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: locks.NoWait})
	require.ErrorIs(t, err, locks.ErrNotObtained, "exclusive waits for shared holders")

	require.NoError(t, r1.Release())
	require.NoError(t, r2.Release())
	w, err := locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: locks.NoWait})
	require.NoError(t, err)
	_, err = locks.AcquireFile(ctx, path, sh)
	require.ErrorIs(t, err, locks.ErrNotObtained, "shared waits for the exclusive holder")
	require.NoError(t, w.Release())
}

func TestAcquireFileContextEnds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	l1, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.NoError(t, err)
	defer l1.Release()

	// Canceled once AcquireFile was refused and polls again: it ends
	// while waiting.
	inner, cancel := context.WithCancel(context.Background())
	polling := newPollSignal(inner)
	go func() { <-polling.polled; cancel() }()
	_, err = locks.AcquireFile(polling, path, locks.FileOptions{Timeout: time.Minute})
	require.ErrorIs(t, err, locks.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)

	ctx, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	_, err = locks.AcquireFile(ctx, path, locks.FileOptions{Timeout: time.Minute})
	require.ErrorIs(t, err, locks.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestAcquireFileNeverTruncates(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	content := []byte("owner=someone pid=42\n")
	require.NoError(t, os.WriteFile(path, content, 0o600))

	l1, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.NoError(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, content, got, "acquiring must not truncate")

	// Nor does a contender that fails to get it.
	_, err = locks.AcquireFile(context.Background(), path, locks.FileOptions{Timeout: locks.NoWait})
	require.ErrorIs(t, err, locks.ErrNotObtained)
	require.NoError(t, l1.Release())
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, content, got)
}

func TestAcquireFileCreatesPrivateFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.NoError(t, err)
	defer l.Release()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Zero(t, fi.Mode().Perm()&0o077, "only the owner may open a lock file (mode %s)", fi.Mode())
}

func TestAcquireFileRefusesSymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	path := filepath.Join(dir, "x.lock")
	require.NoError(t, os.Symlink(target, path))

	_, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, locks.ErrNotObtained)
	_, statErr := os.Stat(target)
	assert.True(t, errors.Is(statErr, os.ErrNotExist), "the symlink's target must not be created")
}

func TestFileLockReleaseIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{})
	require.NoError(t, err)
	require.NoError(t, l.Release())
	require.NoError(t, l.Release())
	l2, err := locks.AcquireFile(context.Background(), path, locks.FileOptions{Timeout: locks.NoWait})
	require.NoError(t, err)
	require.NoError(t, l2.Release())
}

func BenchmarkFlockAcquireRelease(b *testing.B) {
	path := filepath.Join(b.TempDir(), "x.lock")
	ctx := context.Background()
	for b.Loop() {
		l, err := locks.AcquireFile(ctx, path, locks.FileOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
