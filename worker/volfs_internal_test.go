package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
)

// mounts counts the filesystems mounted at dir.
func mounts(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	n := 0
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 5 && f[4] == dir {
			n++
		}
	}
	return n
}

// Workers sharing a host and a volume root (here: eight volumeFS of the
// same root, as eight workers have) race to mount one volume: it is made
// once and mounted once, whoever wins.
func TestVolumeFSMountRace(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "default.race")
	require.NoError(t, os.Mkdir(dir, 0o750))
	t.Cleanup(func() { assert.NoError(t, UnmountVolumes(root)) })
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		f, err := newVolumeFS(root)
		require.NoError(t, err)
		wg.Go(func() {
			unlock, err := f.lock(t.Context(), "default.race")
			if err != nil {
				errs <- err
				return
			}
			defer unlock()
			_, err = f.ensure(t.Context(), "default.race", dir, imageSize(16<<20), true)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, 1, mounts(t, dir), "the volume is mounted exactly once")
	mnt := filepath.Join(root, imgDirName, "default.race.mnt")
	sp, err := spaceOf(mnt)
	require.NoError(t, err)
	assert.Equal(t, 1, mounts(t, mnt), "its filesystem is mounted exactly once")
	assert.Less(t, sp.used, int64(64<<10), "one empty filesystem")
}

// staticRoot is a volume guard that only tells its root.
type staticRoot string

func (r staticRoot) Root() string { return string(r) }
func (staticRoot) Acquire(context.Context, string, locks.Mode) (Lease, error) {
	return nil, errors.New("unused")
}

// A worker without CAP_SYS_ADMIN (this test runs itself again under
// setpriv, the capability dropped from its bounding set) cannot mount:
// it says why at start and refuses rw volume jobs with a clear message.
func TestVolumeFSUnprivileged(t *testing.T) {
	if root := os.Getenv("PADDOCK_TEST_NOPRIV_ROOT"); root != "" {
		_, err := startVolumeFS(Config{Volumes: staticRoot(root), VolumeQuota: QuotaKernel, Logger: slog.Default()})
		var qe *QuotaUnavailableError
		require.ErrorAs(t, err, &qe)
		assert.Contains(t, err.Error(), "CAP_SYS_ADMIN")
		assert.Contains(t, err.Error(), "--volume-quota=walk")
		t.Log("probe refused:", err)
		return
	}
	root := t.TempDir()
	cmd := exec.Command("setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", "--",
		os.Args[0], "-test.run=^TestVolumeFSUnprivileged$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "PADDOCK_TEST_NOPRIV_ROOT="+root)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "probe refused:")
	assert.Contains(t, string(out), "VOLUME QUOTAS UNAVAILABLE")
	assert.Equal(t, 0, mounts(t, root))

	// The same worker's answer to jobs: rw refused, ro served.
	w := &Worker{cfg: Config{VolumeQuota: QuotaKernel, VolumeMaxBytes: 1 << 30}, vfsErr: &QuotaUnavailableError{Root: root}}
	assert.Contains(t, w.refuseVolume(&job.Volume{Name: "x"}, locks.RW), "cannot hold volumes to a byte quota")
	assert.Empty(t, w.refuseVolume(&job.Volume{Name: "x", Mode: job.VolumeRO}, locks.RO))
}

// BenchmarkVolumeFSMake is what a new volume costs: mkfs of an image made
// to hold 1 GiB, e2fsck, mount, the wall set; then unmount and remove.
func BenchmarkVolumeFSMake(b *testing.B) {
	root := b.TempDir()
	b.Cleanup(func() { _ = UnmountVolumes(root) })
	f, err := newVolumeFS(root)
	require.NoError(b, err)
	dir := filepath.Join(root, "v")
	for b.Loop() {
		require.NoError(b, os.Mkdir(dir, 0o750))
		_, err := f.ensure(b.Context(), "v", dir, imageSize(1<<30), true)
		require.NoError(b, err)
		_, _, err = setWall(b.Context(), f.image("v"), f.mnt("v"), 256<<20)
		require.NoError(b, err)
		require.NoError(b, f.remove("v", dir))
		require.NoError(b, os.Remove(dir))
	}
}

// BenchmarkVolumeFSReuse is what every later job of a volume costs: the
// lock, the mount found in mountinfo, the wall set again.
func BenchmarkVolumeFSReuse(b *testing.B) {
	root := b.TempDir()
	b.Cleanup(func() { _ = UnmountVolumes(root) })
	f, err := newVolumeFS(root)
	require.NoError(b, err)
	dir := filepath.Join(root, "v")
	require.NoError(b, os.Mkdir(dir, 0o750))
	_, err = f.ensure(b.Context(), "v", dir, imageSize(1<<30), true)
	require.NoError(b, err)
	walls := []int64{256 << 20, 128 << 20}
	i := 0
	for b.Loop() {
		unlock, err := f.lock(b.Context(), "v")
		require.NoError(b, err)
		_, err = f.ensure(b.Context(), "v", dir, imageSize(1<<30), true)
		require.NoError(b, err)
		_, _, err = setWall(b.Context(), f.image("v"), f.mnt("v"), walls[i%2])
		require.NoError(b, err)
		unlock()
		i++
	}
}

// A tenant may have at most maxPerTenant volumes on a root: the next one
// is refused with a typed error, before any image is made, and another
// tenant is not affected; deleting one makes room.
func TestVolumeFSTenantCap(t *testing.T) {
	root := t.TempDir()
	t.Cleanup(func() { assert.NoError(t, UnmountVolumes(root)) })
	f, err := newVolumeFS(root)
	require.NoError(t, err)
	f.maxPerTenant = 2
	ensure := func(name string) error {
		dir := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(dir, 0o750))
		unlock, err := f.lock(t.Context(), name)
		require.NoError(t, err)
		defer unlock()
		_, err = f.ensure(t.Context(), name, dir, imageSize(8<<20), true)
		return err
	}
	require.NoError(t, ensure("ta.one"))
	require.NoError(t, ensure("ta.two"))
	require.NoError(t, ensure("ta.one"), "an existing volume is no new one")
	err = ensure("ta.three")
	var tooMany *TooManyVolumesError
	require.ErrorAs(t, err, &tooMany)
	assert.Equal(t, TooManyVolumesError{Tenant: "ta", Have: 2, Max: 2}, *tooMany)
	assert.NotContains(t, err.Error(), root, "the tenant is told no host path")
	_, err = os.Stat(f.image("ta.three"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no image was made")
	require.NoError(t, ensure("tab.one"), "a tenant whose name starts with ta's is another tenant")
	require.NoError(t, ensure("tb.one"))
	require.NoError(t, f.remove("ta.two", filepath.Join(root, "ta.two")))
	require.NoError(t, ensure("ta.three"), "a deleted volume makes room")
}
