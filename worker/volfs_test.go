package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/worker"
)

// quota is the byte quota of the volumes of these tests.
const quota = 8 << 20

// hostDisk is what a volume takes on the host: the image file's size and
// allocated bytes, and the bytes its filesystem holds for jobs (the
// reserve excepted).
type hostDisk struct{ size, alloc, used int64 }

func measure(t *testing.T, root, vol string) hostDisk {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(root, ".img", "default."+vol+".ext4"), &st))
	var fs unix.Statfs_t
	mnt := filepath.Join(root, ".img", "default."+vol+".mnt")
	require.NoError(t, unix.Statfs(mnt, &fs))
	var rs unix.Stat_t // none: the job may have every block
	if err := unix.Stat(filepath.Join(mnt, "reserve"), &rs); err != nil {
		require.ErrorIs(t, err, unix.ENOENT)
	}
	used := (int64(fs.Blocks)-int64(fs.Bfree))*fs.Frsize - rs.Blocks*512
	return hostDisk{size: st.Size, alloc: st.Blocks * 512, used: used}
}

// checkBound asserts that a volume with quota bytes holds no more than
// that, and that its image took no more than that of the host's disk
// beyond what it took empty (before).
func checkBound(t *testing.T, before, after hostDisk) {
	t.Helper()
	assert.LessOrEqual(t, after.used, int64(quota), "the filesystem holds more than the quota")
	assert.LessOrEqual(t, after.alloc-before.alloc, int64(quota)+256<<10, "the image grew on the host by more than the quota")
	assert.LessOrEqual(t, after.alloc, after.size)
	assert.LessOrEqual(t, after.size, int64(volumeCap+volumeCap/16+3<<20), "the image is larger than the worker's cap allows")
	t.Logf("image %d bytes, %d allocated (%d before), filesystem holds %d", after.size, after.alloc, before.alloc, after.used)
}

func quotaVol(name string) *job.Volume {
	return &job.Volume{Name: name, Mode: job.VolumeRW, MaxBytes: quota}
}

// The old bypass: a file unlinked while open. Its blocks stay allocated
// on the volume's filesystem, so the kernel refuses what passes the quota
// and the host's image stays within it, measured while the file is still
// open.
func TestVolumeQuotaUnlinkedOpenFile(t *testing.T) {
	s, root := volumeStack(t, 0)
	r0 := s.run(job.Spec{Command: "true", Volume: quotaVol("unlinked")})
	require.Equal(t, job.ReasonOK, r0.Reason, r0.Error)
	before := measure(t, root, "unlinked")
	dir := filepath.Join(root, "default.unlinked")
	done := make(chan job.Result, 1)
	go func() {
		done <- s.run(job.Spec{Command: `exec 3>/workspace/big; rm /workspace/big
dd if=/dev/zero bs=1M count=64 >&3; rc=$?
echo "size=$(stat -L -c %s /proc/self/fd/3)"
touch /workspace/written
while [ ! -e /workspace/go ]; do sleep 0.1; done
exit $rc`, Volume: quotaVol("unlinked")})
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "written"))
		return err == nil
	}, 90*time.Second, 20*time.Millisecond, "the job never wrote")
	open := measure(t, root, "unlinked")
	checkBound(t, before, open)
	assert.Greater(t, open.used, int64(quota-2<<20), "the unlinked file's blocks are counted while it is open")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	r := <-done
	assert.Equal(t, job.ReasonFsize, r.Reason, r.Error)
	assert.Contains(t, r.Stderr.Text, "No space left on device")
	assert.Contains(t, r.Error, "quota")
	size := strings.TrimSpace(strings.TrimPrefix(r.Stdout.Text, "size="))
	assert.LessOrEqual(t, len(size), 7, "the unlinked file holds %s bytes", size)
	checkBound(t, before, measure(t, root, "unlinked"))
}

// Every other file trick: each volume ends at its quota at most, on the
// filesystem and on the host.
func TestVolumeQuotaFileTricks(t *testing.T) {
	s, root := volumeStack(t, 0)
	tricks := []struct{ name, script string }{
		{"sparse", `for i in $(seq 0 60); do dd if=/dev/zero of=/workspace/sparse bs=1M count=1 seek=$((i*4)) conv=notrunc || exit 1; done`},
		{"hardlinks", `head -c 6291456 /dev/zero > /workspace/a && for i in $(seq 50); do ln /workspace/a /workspace/l$i; done && dd if=/dev/zero of=/workspace/b bs=1M count=6`},
		{"smallfiles", `i=0; while dd if=/dev/zero of=/workspace/s$i bs=4k count=1 2>/tmp/err; do i=$((i+1)); done; cat /tmp/err >&2; echo "files=$i"; exit 1`},
		// A redirection, not touch: a fork per inode (~4,400 of them) can pass
		// the 30 s command timeout on a loaded host.
		{"emptyfiles", `i=0; while : 2>/dev/null >/workspace/e$i; do i=$((i+1)); done; : >/workspace/e$i; dd if=/dev/zero of=/workspace/last bs=1M count=64`},
		{"fallocate", `fallocate -l 7340032 /workspace/fa && fallocate -l 2097152 /workspace/fb`},
		{"fallocate-huge", `fallocate -l 134217728 /workspace/fa`},
		{"nested", `d=/workspace/n; for i in $(seq 300); do d=$d/d; done; mkdir -p $d && dd if=/dev/zero of=$d/big bs=1M count=64`},
		{"truncate-then-fill", `truncate -s 200M /workspace/t && dd if=/dev/zero of=/workspace/t bs=1M count=64 conv=notrunc`},
	}
	for _, tc := range tricks {
		t.Run(tc.name, func(t *testing.T) {
			r0 := s.run(job.Spec{Command: "true", Volume: quotaVol(tc.name)})
			require.Equal(t, job.ReasonOK, r0.Reason, r0.Error)
			before := measure(t, root, tc.name)
			r := s.run(job.Spec{Command: tc.script, Volume: quotaVol(tc.name)})
			assert.Equal(t, job.ReasonFsize, r.Reason, "%s\n%s", r.Error, r.Stderr.Text)
			assert.Contains(t, r.Stderr.Text, "No space left on device")
			checkBound(t, before, measure(t, root, tc.name))
			assert.LessOrEqual(t, r.VolumeBytes, int64(quota))
		})
	}
}

// The quota holds across jobs (job 1's files count for job 2), follows
// each job's bound (a lower bound leaves a volume over it only
// shrinkable), and a delete unmounts the filesystem and
// removes its image.
func TestVolumeQuotaAcrossJobs(t *testing.T) {
	s, root := volumeStack(t, 0)
	dir := filepath.Join(root, "default.keep")
	img := filepath.Join(root, ".img", "default.keep.ext4")
	vol := func(n int64) *job.Volume { return &job.Volume{Name: "keep", Mode: job.VolumeRW, MaxBytes: n} }
	r1 := s.run(job.Spec{Command: "dd if=/dev/zero of=/workspace/keep bs=1M count=6", Volume: vol(quota)})
	require.Equal(t, job.ReasonOK, r1.Reason, r1.Error)
	assert.InDelta(t, 6<<20, r1.VolumeBytes, 64<<10)
	r2 := s.run(job.Spec{Command: "dd if=/dev/zero of=/workspace/more bs=1M count=4", Volume: vol(quota)})
	assert.Equal(t, job.ReasonFsize, r2.Reason, r2.Error)
	assert.LessOrEqual(t, r2.VolumeBytes, int64(quota))
	st, err := os.Stat(filepath.Join(dir, "more"))
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Size(), int64(2<<20), "job 1's 6 MiB count against job 2")

	// A higher bound grows the image, online: the files stay.
	r3 := s.run(job.Spec{Command: "rm /workspace/more; dd if=/dev/zero of=/workspace/more bs=1M count=8", Volume: vol(16 << 20)})
	require.Equal(t, job.ReasonOK, r3.Reason, r3.Error)
	assert.InDelta(t, 14<<20, r3.VolumeBytes, 64<<10)

	// A lower bound than the volume holds: nothing more may be written.
	r4 := s.run(job.Spec{Command: "echo x > /workspace/tiny", Volume: vol(4 << 20)})
	assert.Equal(t, job.ReasonFsize, r4.Reason, r4.Error)
	r5 := s.run(job.Spec{Command: "rm /workspace/more /workspace/keep /workspace/tiny; dd if=/dev/zero of=/workspace/small bs=1M count=2", Volume: vol(4 << 20)})
	require.Equal(t, job.ReasonOK, r5.Reason, r5.Error)

	// The box sees its data only: no reserve, no lost+found.
	ls := s.run(job.Spec{Command: "ls -a /workspace", Volume: vol(4 << 20)})
	require.Equal(t, job.ReasonOK, ls.Reason, ls.Error)
	assert.Equal(t, ".\n..\nsmall\n", ls.Stdout.Text)

	// A reboot (every mount gone): a read-only job mounts it again, and
	// the wall holds for the next rw job.
	require.NoError(t, worker.UnmountVolumes(root))
	ro := s.run(job.Spec{Command: "wc -c < /workspace/small", Volume: &job.Volume{Name: "keep", Mode: job.VolumeRO}})
	require.Equal(t, job.ReasonOK, ro.Reason, ro.Error)
	assert.Equal(t, "2097152", strings.TrimSpace(ro.Stdout.Text))
	r7 := s.run(job.Spec{Command: "dd if=/dev/zero of=/workspace/more bs=1M count=4", Volume: vol(4 << 20)})
	assert.Equal(t, job.ReasonFsize, r7.Reason, r7.Error)
	assert.LessOrEqual(t, r7.VolumeBytes, int64(4<<20))

	// Only the worker's own mount of the filesystem went (an operator's
	// umount): the same device is mounted again, never a second loop
	// device on the image.
	mnt := filepath.Join(root, ".img", "default.keep.mnt")
	require.NoError(t, unix.Unmount(mnt, 0))
	r8 := s.run(job.Spec{Command: "rm /workspace/more; wc -c < /workspace/small", Volume: vol(4 << 20)})
	require.Equal(t, job.ReasonOK, r8.Reason, r8.Error)
	assert.Equal(t, "2097152", strings.TrimSpace(r8.Stdout.Text))
	src, _ := mountSource(t, dir)
	msrc, _ := mountSource(t, mnt)
	assert.Equal(t, src, msrc, "one loop device")

	_, mounted := mountPoint(t, dir)
	require.True(t, mounted)
	d := vol(0)
	d.Delete = true
	r6 := s.run(job.Spec{Command: "true", Volume: d})
	require.Equal(t, job.ReasonOK, r6.Reason, r6.Error)
	_, mounted = mountPoint(t, dir)
	assert.False(t, mounted, "the volume's filesystem is unmounted")
	assert.NoFileExists(t, img)
	assert.NoDirExists(t, dir)
	_, mounted = mountPoint(t, mnt)
	assert.False(t, mounted, "the filesystem is unmounted")
	assert.NoDirExists(t, mnt)
}

// mountPoint returns the filesystem type mounted at dir, if any.
func mountPoint(t *testing.T, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	fstype, found := "", false
	for line := range strings.Lines(string(b)) {
		pre, post, _ := strings.Cut(line, " - ")
		if f := strings.Fields(pre); len(f) >= 5 && f[4] == dir {
			fstype, found = strings.Fields(post)[0], true
		}
	}
	return fstype, found
}

// A worker that cannot make volume filesystems (here: no mkfs.ext4 on its
// PATH) refuses rw volume jobs with a clear reason, and still serves
// read-only ones.
func TestVolumeQuotaUnavailable(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Chmod(root, 0o755))
	s := newStackRedis(t, func(c *worker.Config, rdb *redis.Client) {
		t.Setenv("PATH", t.TempDir())
		leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{})
		require.NoError(t, err)
		g, err := locks.NewGuard(leaser, locks.GuardConfig{Root: root, Wait: time.Minute})
		require.NoError(t, err)
		c.Volumes = worker.LockGuard(g)
	})
	r := s.run(job.Spec{Command: "echo x > /workspace/x", Volume: quotaVol("nofs")})
	assert.Equal(t, job.ReasonRejected, r.Reason, r.Error)
	assert.Contains(t, r.Error, "cannot hold volumes to a byte quota")
	assert.NotContains(t, r.Error, root, "no host path in a tenant's result")
	assert.NoFileExists(t, filepath.Join(root, "default.nofs", "x"))
	ro := s.run(job.Spec{Command: "ls /workspace && echo read", Volume: &job.Volume{Name: "nofs", Mode: job.VolumeRO}})
	assert.Equal(t, job.ReasonOK, ro.Reason, ro.Error)
}

// mountSource returns the device mounted at dir, if any.
func mountSource(t *testing.T, dir string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	src, found := "", false
	for line := range strings.Lines(string(b)) {
		pre, post, _ := strings.Cut(line, " - ")
		if f := strings.Fields(pre); len(f) >= 5 && f[4] == dir {
			src, found = strings.Fields(post)[1], true
		}
	}
	return src, found
}

// A volume directory with files but no image (made by a walk-mode worker)
// is not mounted over: its rw job ends infra, naming the migration, and
// the files are still there.
func TestVolumeQuotaOldVolumeNotHidden(t *testing.T) {
	s, root := volumeStack(t, 0)
	dir := filepath.Join(root, "default.old")
	require.NoError(t, os.Mkdir(dir, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kept"), []byte("old data"), 0o644))
	r := s.run(job.Spec{Command: "ls /workspace", Volume: quotaVol("old")})
	assert.Equal(t, job.ReasonInfra, r.Reason, r.Error)
	assert.Contains(t, r.Error, "holds files but has no filesystem image; migrate it")
	assert.Equal(t, 1, r.Runs, "not retried: another try finds the same")
	_, mounted := mountPoint(t, dir)
	assert.False(t, mounted)
	assert.FileExists(t, filepath.Join(dir, "kept"))
}
