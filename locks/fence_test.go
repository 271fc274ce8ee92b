package locks_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/locks"
)

func TestCheckAndRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vol.fence")

	highest, err := locks.ReadFence(ctx, path)
	require.NoError(t, err)
	assert.Zero(t, highest, "no fence file: nothing seen yet")

	require.NoError(t, locks.CheckAndRecord(ctx, path, 5))
	require.NoError(t, locks.CheckAndRecord(ctx, path, 5), "the same holder writes again")
	require.NoError(t, locks.CheckAndRecord(ctx, path, 7))

	err = locks.CheckAndRecord(ctx, path, 6)
	require.ErrorIs(t, err, locks.ErrStaleToken)
	var se *locks.StaleTokenError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, locks.StaleTokenError{Token: 6, Highest: 7, Path: path}, *se)
	assert.Contains(t, err.Error(), "6")

	highest, err = locks.ReadFence(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, int64(7), highest)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "00000000000000000007\n", string(b), "fixed-width record, updated in place")

	for _, bad := range []int64{0, -1} {
		require.ErrorIs(t, locks.CheckAndRecord(ctx, path, bad), locks.ErrInvalid)
	}
}

func TestFencedWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vol.fence")
	calls := 0
	write := func() error { calls++; return nil }

	require.NoError(t, locks.FencedWrite(ctx, path, 3, write))
	require.ErrorIs(t, locks.FencedWrite(ctx, path, 2, write), locks.ErrStaleToken)
	assert.Equal(t, 1, calls, "the stale write did not run")

	boom := errors.New("disk full")
	require.ErrorIs(t, locks.FencedWrite(ctx, path, 4, func() error { return boom }), boom)
	highest, err := locks.ReadFence(ctx, path)
	require.NoError(t, err)
	assert.Equal(t, int64(4), highest, "recorded before the write: a failed write may have landed partly")
}

func TestFenceFileCorrupt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, content := range map[string]string{
		"garbage":  "not a number\n",
		"negative": "-5\n",
		"overflow": "99999999999999999999999\n",
	} {
		path := filepath.Join(t.TempDir(), "vol.fence")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		err := locks.CheckAndRecord(ctx, path, 1<<40)
		require.Error(t, err, name)
		assert.NotErrorIs(t, err, locks.ErrStaleToken, name)
		assert.Contains(t, err.Error(), "corrupt", name)
	}
	// A hand-written number (no padding) is read fine and then rewritten.
	path := filepath.Join(t.TempDir(), "vol.fence")
	require.NoError(t, os.WriteFile(path, []byte(" 12 \n"), 0o600))
	require.ErrorIs(t, locks.CheckAndRecord(ctx, path, 11), locks.ErrStaleToken)
	require.NoError(t, locks.CheckAndRecord(ctx, path, 13))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "00000000000000000013\n", string(b))
}

// FencedWrite runs each write under the fence file's flock: concurrent
// writers with the current token do not lose updates.
func TestFencedWriteSerializes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "vol.fence")
	counter := filepath.Join(dir, "counter")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				err := locks.FencedWrite(ctx, path, 1, func() error {
					n := 0
					if b, err := os.ReadFile(counter); err == nil {
						n, _ = strconv.Atoi(string(b))
					}
					return os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o600)
				})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(counter)
	require.NoError(t, err)
	assert.Equal(t, "200", string(b))
}

func BenchmarkFencedWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "vol.fence")
	ctx := context.Background()
	for b.Loop() {
		if err := locks.CheckAndRecord(ctx, path, 1); err != nil {
			b.Fatal(err)
		}
	}
}
