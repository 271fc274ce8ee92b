package locks_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/locks"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"build-cache", true},
		{"Repo_1.v2", true},
		{"0", true},
		{"a.b.c", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", false},
		{"a..b", false},
		{"a..", false},
		{"../etc", false},
		{"a/b", false},
		{"a/../b", false},
		{"/abs", false},
		{"./a", false},
		{".locks", false},
		{".hidden", false},
		{"-flag", false},
		{"_a", false},
		{"a b", false},
		{"a\x00b", false},
		{"a\n", false},
		{"a\\b", false},
		{"é", false},
		{"a:b", false},
		{"~", false},
	} {
		err := locks.ValidateName(tc.name)
		if tc.ok {
			assert.NoError(t, err, "%q", tc.name)
			continue
		}
		require.Error(t, err, "%q", tc.name)
		assert.ErrorIs(t, err, locks.ErrInvalid, "%q", tc.name)
		var ne *locks.NameError
		assert.ErrorAs(t, err, &ne, "%q", tc.name)
		assert.False(t, locks.Retryable(err))
	}
}

// A valid name is one plain path component: joined to a root it stays
// directly under it, and it never names the lock directory.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "..", "a/b", "a..b", ".locks", "x\x00", strings.Repeat("z", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if locks.ValidateName(name) != nil {
			return
		}
		const root = "/volumes"
		p := filepath.Join(root, name)
		if filepath.Dir(p) != root || filepath.Base(p) != name || strings.HasPrefix(name, ".") {
			t.Fatalf("valid name %q escapes or hides: %q", name, p)
		}
	})
}

func TestNewGuardConfig(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for name, cfg := range map[string]locks.GuardConfig{
		"no root":          {},
		"missing root":     {Root: filepath.Join(t.TempDir(), "missing")},
		"root is a file":   {Root: file},
		"ttl too short":    {Root: t.TempDir(), LeaseTTL: time.Millisecond},
		"bad uid":          {Root: t.TempDir(), UID: -2},
		"bad dir mode":     {Root: t.TempDir(), DirPerm: os.ModeSetuid | 0o755},
		"negative release": {Root: t.TempDir(), ReleaseTimeout: -time.Second},
	} {
		_, err := locks.NewGuard(s.leaser, cfg)
		assert.ErrorIs(t, err, locks.ErrInvalid, name)
	}
	_, err := locks.NewGuard(nil, locks.GuardConfig{Root: t.TempDir()})
	assert.ErrorIs(t, err, locks.ErrInvalid)

	// A symlinked lock directory could point anywhere: refused.
	root := t.TempDir()
	require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(root, ".locks")))
	_, err = locks.NewGuard(s.leaser, locks.GuardConfig{Root: root})
	assert.ErrorIs(t, err, locks.ErrInvalid)
}

func TestGuardRWExclusive(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	g := s.guard(t, locks.GuardConfig{Wait: 100 * time.Millisecond})

	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(g.Root(), "vol"), h.Dir())
	assert.Equal(t, "vol", h.Name())
	assert.Equal(t, locks.RW, h.Mode())
	fi, err := os.Stat(h.Dir())
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Positive(t, h.FencingToken())
	assert.False(t, closed(h.Lost()))
	assert.NotEmpty(t, s.leaseOwner(t, "volume:vol"))
	highest, err := locks.ReadFence(ctx, h.FencePath())
	require.NoError(t, err)
	assert.Equal(t, h.FencingToken(), highest, "Acquire records the new token")
	assert.NotContains(t, h.FencePath(), h.Dir(), "the fence file is outside the mounted directory")

	_, err = g.Acquire(ctx, "vol", locks.RW)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	var te *locks.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "lease", te.Lock)

	noWait := s.guard(t, locks.GuardConfig{Root: g.Root(), Wait: locks.NoWait})
	_, err = noWait.Acquire(ctx, "vol", locks.RW)
	require.ErrorIs(t, err, locks.ErrNotObtained)

	other, err := g.Acquire(ctx, "other", locks.RW)
	require.NoError(t, err, "volumes are independent")
	require.NoError(t, other.Release())

	require.NoError(t, h.Release())
	require.NoError(t, h.Release(), "Release is idempotent")
	assert.Empty(t, s.leaseOwner(t, "volume:vol"))

	h2, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	assert.Greater(t, h2.FencingToken(), h.FencingToken())
	require.NoError(t, h2.Release())

	_, err = g.Acquire(ctx, "vol", locks.Mode(0))
	require.ErrorIs(t, err, locks.ErrInvalid)
}

func TestGuardROTakesNoLock(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	g := s.guard(t, locks.GuardConfig{Wait: 100 * time.Millisecond})
	w, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	defer w.Release()

	r, err := g.Acquire(ctx, "vol", locks.RO)
	require.NoError(t, err, "a reader does not wait for the writer")
	assert.Equal(t, w.Dir(), r.Dir())
	assert.Equal(t, locks.RO, r.Mode())
	assert.Zero(t, r.FencingToken())
	assert.NotNil(t, r.Lost())
	assert.False(t, closed(r.Lost()))
	assert.Nil(t, r.Err())
	require.ErrorIs(t, r.FencedWrite(ctx, func() error { return nil }), locks.ErrNotHeld)
	require.NoError(t, r.Release())

	// Nor does a writer wait for readers.
	r2, err := g.Acquire(ctx, "fresh", locks.RO)
	require.NoError(t, err)
	defer r2.Release()
	w2, err := g.Acquire(ctx, "fresh", locks.RW)
	require.NoError(t, err)
	require.NoError(t, w2.Release())
}

func TestGuardVolumeDirOwnership(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	root := t.TempDir()
	g := s.guard(t, locks.GuardConfig{Root: root})

	wantUID, wantGID := locks.DefaultVolumeUID, locks.DefaultVolumeGID
	if os.Geteuid() != 0 {
		// Without the right to chown the Guard keeps going (and warns):
		// the directory stays ours.
		wantUID, wantGID = os.Geteuid(), os.Getegid()
	}
	h, err := g.Acquire(ctx, "new", locks.RW)
	require.NoError(t, err)
	require.NoError(t, h.Release())
	st := statT(t, h.Dir())
	assert.Equal(t, wantUID, int(st.Uid))
	assert.Equal(t, wantGID, int(st.Gid))
	assert.Equal(t, os.FileMode(locks.DefaultDirPerm), statMode(t, h.Dir()))

	// An existing directory gets its owner fixed, its mode left alone.
	require.NoError(t, os.Mkdir(filepath.Join(root, "old"), 0o770))
	require.NoError(t, os.Chmod(filepath.Join(root, "old"), 0o770)) // past the umask
	h, err = g.Acquire(ctx, "old", locks.RO)
	require.NoError(t, err)
	require.NoError(t, h.Release())
	st = statT(t, h.Dir())
	assert.Equal(t, wantUID, int(st.Uid))
	assert.Equal(t, os.FileMode(0o770), statMode(t, h.Dir()))

	// UID and GID -1 leave ownership alone.
	g = s.guard(t, locks.GuardConfig{Root: root, UID: -1, GID: -1})
	h, err = g.Acquire(ctx, "mine", locks.RO)
	require.NoError(t, err)
	st = statT(t, h.Dir())
	assert.Equal(t, os.Geteuid(), int(st.Uid))
	require.NoError(t, h.Release())
}

func statT(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t)
}

func statMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

// Path tricks: a name that passes validation can still be a symlink (or a
// file) planted under the root. The Guard refuses it instead of following it,
// takes no lease for it, and creates nothing outside the root.
func TestGuardRefusesSymlinkEscape(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	root := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "evil")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "made-by-guard"), filepath.Join(root, "dangling")))
	require.NoError(t, os.Symlink("../"+filepath.Base(outside), filepath.Join(root, "relative")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o600))
	g := s.guard(t, locks.GuardConfig{Root: root})

	for _, name := range []string{"evil", "dangling", "relative", "file"} {
		for _, mode := range []locks.Mode{locks.RW, locks.RO} {
			_, err := g.Acquire(ctx, name, mode)
			require.ErrorIs(t, err, locks.ErrInvalid, "%s %s", name, mode)
			var ne *locks.NameError
			require.ErrorAs(t, err, &ne)
			assert.Empty(t, s.leaseOwner(t, "volume:"+name))
		}
	}
	for _, name := range []string{"..", "../" + filepath.Base(outside), "a/b", "."} {
		_, err := g.Acquire(ctx, name, locks.RW)
		require.ErrorIs(t, err, locks.ErrInvalid, name)
	}
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing created outside the root")
	st := statT(t, outside)
	assert.Equal(t, os.Geteuid(), int(st.Uid), "the symlink's target was not chowned")
}

// A root given through a symlink is resolved once: Dir is under the real root.
func TestGuardResolvesRootSymlink(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "volumes")
	require.NoError(t, os.Symlink(real, link))
	g := s.guard(t, locks.GuardConfig{Root: link})
	realResolved, err := filepath.EvalSymlinks(real)
	require.NoError(t, err)
	assert.Equal(t, realResolved, g.Root())
	h, err := g.Acquire(context.Background(), "vol", locks.RW)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(realResolved, "vol"), h.Dir())
	require.NoError(t, h.Release())
}

func TestGuardLockFileNeverTruncated(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	root := t.TempDir()
	g := s.guard(t, locks.GuardConfig{Root: root})
	lockPath := filepath.Join(root, ".locks", "vol.lock")
	content := []byte("do not truncate me\n")
	require.NoError(t, os.WriteFile(lockPath, content, 0o600))

	h, err := g.Acquire(context.Background(), "vol", locks.RW)
	require.NoError(t, err)
	got, err := os.ReadFile(lockPath)
	require.NoError(t, err)
	assert.Equal(t, content, got)
	require.NoError(t, h.Release())
	got, err = os.ReadFile(lockPath)
	require.NoError(t, err)
	assert.Equal(t, content, got)
}

// When the flock stays busy after the lease was obtained, the lease is
// handed back, not left to block the volume for its ttl.
func TestGuardFlockBusyReleasesLease(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	root := t.TempDir()
	g := s.guard(t, locks.GuardConfig{Root: root, Wait: 200 * time.Millisecond})
	fl, err := locks.AcquireFile(ctx, filepath.Join(root, ".locks", "vol.lock"), locks.FileOptions{})
	require.NoError(t, err)

	_, err = g.Acquire(ctx, "vol", locks.RW)
	require.ErrorIs(t, err, locks.ErrNotObtained)
	var te *locks.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, "flock", te.Lock)
	assert.Equal(t, filepath.Join(g.Root(), ".locks", "vol.lock"), te.Name)
	assert.Empty(t, s.leaseOwner(t, "volume:vol"))

	require.NoError(t, fl.Release())
	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	require.NoError(t, h.Release())
}

// Fencing through the Guard: once a newer holder has acquired the volume,
// the older holder's fenced writes are rejected, whether or not the newer
// one has written yet.
func TestGuardFencing(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	g := s.guard(t, locks.GuardConfig{LeaseTTL: 2 * time.Second})
	data := func(h *locks.Held) string { return filepath.Join(h.Dir(), "data") }

	old, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	require.NoError(t, old.FencedWrite(ctx, func() error { return os.WriteFile(data(old), []byte("old"), 0o644) }))
	// The old holder's lease is lost (as if it had paused past its ttl)...
	key, _ := s.leaser.KeysForTest("volume:vol")
	require.NoError(t, s.rdb.Del(ctx, key).Err())
	eventually(t, 30*time.Second, func() bool { return closed(old.Lost()) }, "old lease lost")
	require.ErrorIs(t, old.Err(), locks.ErrLeaseLost)
	// ...and its flock released (as another host would not see it anyway).
	require.ErrorIs(t, old.Release(), locks.ErrNotHeld)

	cur, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	defer cur.Release()
	wrote := false
	err = old.FencedWrite(ctx, func() error { wrote = true; return nil })
	require.ErrorIs(t, err, locks.ErrStaleToken)
	var se *locks.StaleTokenError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, old.FencingToken(), se.Token)
	assert.Equal(t, cur.FencingToken(), se.Highest)
	assert.False(t, locks.Retryable(err))
	assert.False(t, wrote, "a stale write never runs")

	require.NoError(t, cur.FencedWrite(ctx, func() error { return os.WriteFile(data(cur), []byte("cur"), 0o644) }))
	b, err := os.ReadFile(data(cur))
	require.NoError(t, err)
	assert.Equal(t, "cur", string(b))
}

// If Redis loses the fencing counter (no AOF, failover to a lagging
// replica), the next Acquire raises it past the highest token the volume has
// recorded, instead of handing out tokens every fenced write would reject.
func TestGuardHealsLostFencingCounter(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	g := s.guard(t, locks.GuardConfig{})
	var last int64
	for range 3 {
		h, err := g.Acquire(ctx, "vol", locks.RW)
		require.NoError(t, err)
		last = h.FencingToken()
		require.NoError(t, h.Release())
	}
	_, fenceKey := s.leaser.KeysForTest("volume:vol")
	require.NoError(t, s.rdb.Del(ctx, fenceKey).Err())

	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	assert.Equal(t, last+1, h.FencingToken())
	require.NoError(t, h.FencedWrite(ctx, nil))
	require.NoError(t, h.Release())
}

// Release runs on its own context: a job whose context was canceled still
// lets go of both locks.
func TestGuardReleaseAfterCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	root := t.TempDir()
	g := s.guard(t, locks.GuardConfig{Root: root})
	ctx, cancel := context.WithCancel(context.Background())
	h, err := g.Acquire(ctx, "vol", locks.RW)
	require.NoError(t, err)
	cancel()
	require.NoError(t, h.Release())
	assert.Empty(t, s.leaseOwner(t, "volume:vol"))
	fl, err := locks.AcquireFile(context.Background(), filepath.Join(root, ".locks", "vol.lock"),
		locks.FileOptions{Timeout: locks.NoWait})
	require.NoError(t, err)
	require.NoError(t, fl.Release())
}

func BenchmarkGuardAcquireRelease(b *testing.B) {
	s := newSetup(b)
	g := s.guard(b, locks.GuardConfig{})
	ctx := context.Background()
	for b.Loop() {
		h, err := g.Acquire(ctx, "bench", locks.RW)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
