package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// An agent session's workspace on a worker that measures quotas by
// walking the volume (--volume-quota=walk): output spilled into it whole
// while the result keeps head and tail, a byte quota the job cannot grow
// past (but may shrink under), and a delete job that removes it. The root
// is on a disk of its own: a job held to the disk's free bytes must see
// no other writer of this machine.
func TestSessionWorkspaceWalk(t *testing.T) {
	s, root := volumeStackRoot(t, 0, worker.QuotaWalk, privateDisk(t, 256<<20))
	dir := filepath.Join(root, "default.sess-a")
	vol := func() *job.Volume { return &job.Volume{Name: "sess-a", Mode: job.VolumeRW, MaxBytes: 4 << 20} }
	// 200,000 lines: far past the result's head and tail, all in the spill.
	outCap := int64(64 << 10)
	r := s.run(job.Spec{Command: "seq 200000; echo oops >&2", Volume: vol(), Output: &job.OutputPolicy{Spill: true},
		Limits: job.Limits{OutputBytes: &outCap}})
	require.Equal(t, job.ReasonOK, r.Reason, r.Error)
	require.True(t, r.Stdout.Truncated)
	require.NotNil(t, r.Spilled)
	assert.Equal(t, "/workspace/.paddock/out/"+r.ID+".stdout", r.Spilled.Stdout.Path)
	assert.Equal(t, r.Stdout.Bytes, r.Spilled.Stdout.Bytes)
	assert.Empty(t, r.Spilled.Stdout.Error)
	b, err := os.ReadFile(filepath.Join(dir, ".paddock", "out", r.ID+".stdout"))
	require.NoError(t, err)
	assert.Len(t, b, int(r.Stdout.Bytes))
	assert.True(t, strings.HasSuffix(string(b), "199999\n200000\n"))
	e, err := os.ReadFile(filepath.Join(dir, ".paddock", "out", r.ID+".stderr"))
	require.NoError(t, err)
	assert.Equal(t, "oops\n", string(e))
	assert.Positive(t, r.VolumeBytes)

	// The next command pages the spill file in the same workspace.
	r2 := s.run(job.Spec{Command: "sed -n '100000,100002p' " + r.Spilled.Stdout.Path, Volume: vol()})
	require.Equal(t, job.ReasonOK, r2.Reason, r2.Error)
	assert.Equal(t, "100000\n100001\n100002\n", r2.Stdout.Text)

	// A planted symlink where the next spill goes is not followed.
	r3 := s.run(job.Spec{Command: "ln -s /etc/passwd /workspace/.paddock/out/next.stdout; echo planted", Volume: vol()})
	require.Equal(t, job.ReasonOK, r3.Reason, r3.Error)
	r4 := s.run(job.Spec{ID: "next", Command: "echo hi", Volume: vol(), Output: &job.OutputPolicy{Spill: true}})
	require.Equal(t, job.ReasonOK, r4.Reason, r4.Error)
	assert.Contains(t, r4.Spilled.Stdout.Error, "symlink")
	assert.Zero(t, r4.Spilled.Stdout.Bytes)
	assert.Equal(t, "hi\n", r4.Stdout.Text, "the command's own output is unaffected")

	// Past the quota: killed as fsize, the file stays; a shrinking job runs.
	r5 := s.run(job.Spec{Command: "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 1048576 /dev/zero > /workspace/f$i; sleep 0.3; done; sleep 30", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r5.Reason, r5.Error)
	assert.Contains(t, r5.Error, "quota")
	r6 := s.run(job.Spec{Command: "rm -f /workspace/f*; echo freed", Volume: vol()})
	require.Equal(t, job.ReasonOK, r6.Reason, r6.Error)
	assert.Less(t, r6.VolumeBytes, int64(4<<20))

	// Nesting past what the measurement walks cannot hide bytes from it.
	r5b := s.run(job.Spec{Command: "d=/workspace/n; for i in $(seq 300); do d=$d/d; done; mkdir -p $d; head -c 6000000 /dev/zero > $d/big; sleep 30", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r5b.Reason, r5b.Error)
	// The next job cannot measure that workspace either, so it is held to
	// the disk: writing where the walk cannot see gets it killed early.
	r5x := s.run(job.Spec{Command: "cd /workspace/n; while cd d 2>/dev/null; do :; done; for i in $(seq 64); do head -c 1048576 /dev/zero >> more; sleep 0.2; done; sleep 30", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r5x.Reason, r5x.Error)
	assert.Contains(t, r5x.Error, "held to the disk")
	deep := filepath.Join(dir, "n")
	for range 300 {
		deep = filepath.Join(deep, "d")
	}
	st, err := os.Stat(filepath.Join(deep, "more"))
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(32<<20), "killed near the quota, not after 64 MiB")
	// It may clean up, however long that takes (the room covers the other
	// writers on this machine's disk, which count against such a job).
	clean := vol()
	clean.MaxBytes = 1 << 30
	r5c := s.run(job.Spec{Command: "sleep 2; rm -rf /workspace/n", Volume: clean})
	require.Equal(t, job.ReasonOK, r5c.Reason, r5c.Error)

	// A job that writes past the quota and ends before the next look is
	// still fsize, and the next job may not grow the volume further.
	r5d := s.run(job.Spec{Command: "head -c 6000000 /dev/zero > /workspace/quick", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r5d.Reason, r5d.Error)
	assert.Contains(t, r5d.Error, "over its quota")
	r5e := s.run(job.Spec{Command: "head -c 100000 /dev/zero > /workspace/more", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r5e.Reason, "a volume over its quota may only shrink: %s", r5e.Error)
	r5f := s.run(job.Spec{Command: "rm -f /workspace/quick /workspace/more", Volume: vol()})
	require.Equal(t, job.ReasonOK, r5f.Reason, r5f.Error)

	// Delete: the directory is gone after the result says so.
	d := vol()
	d.Delete = true
	r7 := s.run(job.Spec{Command: "true", Volume: d})
	require.Equal(t, job.ReasonOK, r7.Reason, r7.Error)
	assert.Zero(t, r7.VolumeBytes)
	assert.NoDirExists(t, dir)
}

// An agent session's workspace on kernel quotas: spilled output is cut at
// the room the quota leaves, a command that writes past the quota fails
// with ENOSPC (fsize) and leaves the workspace at its quota, the next
// command may clean it up, and the delete job removes it whole.
func TestSessionWorkspaceKernel(t *testing.T) {
	s, root := volumeStack(t, 0)
	dir := filepath.Join(root, "default.sess-k")
	vol := func() *job.Volume { return &job.Volume{Name: "sess-k", Mode: job.VolumeRW, MaxBytes: 4 << 20} }
	outCap := int64(64 << 10)
	r := s.run(job.Spec{Command: "seq 2000000", Volume: vol(), Output: &job.OutputPolicy{Spill: true},
		Limits: job.Limits{OutputBytes: &outCap}})
	require.Equal(t, job.ReasonOK, r.Reason, r.Error)
	require.NotNil(t, r.Spilled)
	assert.Less(t, r.Spilled.Stdout.Bytes, r.Stdout.Bytes, "the spill is cut")
	assert.LessOrEqual(t, r.VolumeBytes, int64(4<<20))

	r2 := s.run(job.Spec{Command: "dd if=/dev/zero of=/workspace/big bs=1M count=8", Volume: vol()})
	assert.Equal(t, job.ReasonFsize, r2.Reason, r2.Error)
	assert.Contains(t, r2.Error, "the kernel refused further writes")
	assert.LessOrEqual(t, r2.VolumeBytes, int64(4<<20))
	r3 := s.run(job.Spec{Command: "rm -rf /workspace/big /workspace/.paddock && echo freed", Volume: vol()})
	require.Equal(t, job.ReasonOK, r3.Reason, r3.Error)
	assert.Less(t, r3.VolumeBytes, int64(64<<10))

	d := vol()
	d.Delete = true
	r4 := s.run(job.Spec{Command: "true", Volume: d})
	require.Equal(t, job.ReasonOK, r4.Reason, r4.Error)
	assert.NoDirExists(t, dir)
	assert.NoFileExists(t, filepath.Join(root, ".img", "default.sess-k.ext4"))
}
