package worker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/locks"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/worker"
)

// volumeStack is a stack whose worker guards volumes under a temp root.
func volumeStack(t *testing.T, ttl time.Duration) (*stack, string) {
	t.Helper()
	return volumeStackQuota(t, ttl, worker.QuotaKernel)
}

// volumeCap is the worker's cap on volumes in these tests: every volume
// image is made to hold it.
const volumeCap = 64 << 20

// volumeStackQuota is volumeStack with the given quota mode; the volume
// filesystems it mounted are unmounted when the test ends.
func volumeStackQuota(t *testing.T, ttl time.Duration, q worker.VolumeQuota) (*stack, string) {
	t.Helper()
	return volumeStackRoot(t, ttl, q, t.TempDir())
}

// privateDisk returns a directory on a filesystem of its own (size bytes,
// loop-mounted, unmounted when the test ends): a disk no other writer on
// this machine touches, for tests that watch a disk's free bytes.
func privateDisk(t *testing.T, size int64) string {
	t.Helper()
	img, dir := filepath.Join(t.TempDir(), "disk.ext4"), t.TempDir()
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, size))
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command("mount", "-o", "loop", img, dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { assert.NoError(t, unix.Unmount(dir, unix.MNT_DETACH)) })
	return dir
}

// volumeStackRoot is volumeStackQuota on the volume root given.
func volumeStackRoot(t *testing.T, ttl time.Duration, q worker.VolumeQuota, root string) (*stack, string) {
	t.Helper()
	require.NoError(t, os.Chmod(root, 0o755))
	t.Cleanup(func() { assert.NoError(t, worker.UnmountVolumes(root)) })
	s := newStackRedis(t, func(c *worker.Config, rdb *redis.Client) {
		c.VolumeQuota = q
		c.VolumeMaxBytes = volumeCap
		c.Concurrency = 3
		leaser, err := locks.NewLeaser(rdb, locks.LeaseConfig{})
		require.NoError(t, err)
		g, err := locks.NewGuard(leaser, locks.GuardConfig{Root: root, LeaseTTL: ttl, Wait: time.Minute})
		require.NoError(t, err)
		c.Volumes = worker.LockGuard(g)
	})
	return s, root
}

func TestVolumeWritersSerialize(t *testing.T) {
	s, root := volumeStack(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Read-modify-write with a pause in the middle: without the lock the
	// three jobs would read the same value and the count would be lost.
	script := `n=$(cat /workspace/counter 2>/dev/null || echo 0); sleep 1; echo $((n+1)) > /workspace/counter; echo "token=$PADDOCK_FENCING_TOKEN"`
	specs := make([]job.Spec, 3)
	for i := range specs {
		specs[i] = job.Spec{Command: script, Volume: &job.Volume{Name: "shared", Mode: job.VolumeRW}}
	}
	subs, err := s.client.SubmitBatch(ctx, specs, nil)
	require.NoError(t, err)
	ids := []string{subs[0].ID, subs[1].ID, subs[2].ID}
	rs, err := s.client.WaitAll(ctx, ids, nil)
	require.NoError(t, err)
	var tokens []int64
	waited := 0
	for _, r := range rs {
		require.Equal(t, job.StateSucceeded, r.State, "%s: %s %s", r.ID, r.Reason, r.Error)
		assert.Positive(t, r.FencingToken)
		assert.Contains(t, r.Stdout.Text, "token=")
		tokens = append(tokens, r.FencingToken)
		if r.LockWaitMS > 500 {
			waited++
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "default.shared", "counter"))
	require.NoError(t, err)
	assert.Equal(t, "3", strings.TrimSpace(string(b)), "every increment must survive")
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	assert.Less(t, tokens[0], tokens[1])
	assert.Less(t, tokens[1], tokens[2])
	assert.GreaterOrEqual(t, waited, 1, "at least one job waited for the lock")
}

// stealLease overwrites the volume's lease key with another owner's token.
func stealLease(t *testing.T, s *stack, volume string) {
	t.Helper()
	ctx := context.Background()
	rdb := s.redisClient()
	require.Eventually(t, func() bool {
		keys, _ := rdb.Keys(ctx, "paddock:lock:*"+volume+"*").Result()
		for _, k := range keys {
			if !strings.HasSuffix(k, ":fence") {
				return rdb.Set(ctx, k, "thief", time.Minute).Err() == nil
			}
		}
		return false
	}, 60*time.Second, 10*time.Millisecond)
}

func TestVolumeLeaseLostWhileRunning(t *testing.T) {
	s, root := volumeStack(t, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := s.client.Submit(ctx, job.Spec{Command: "touch /workspace/started; sleep 60",
		Volume: &job.Volume{Name: "stolen", Mode: job.VolumeRW}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(root, "default.stolen", "started"))
		return err == nil
	}, time.Minute, 10*time.Millisecond, "the job never started")
	stealLease(t, s, "default.stolen")
	r, err := s.client.Wait(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, job.ReasonLeaseLost, r.Reason, r.Error)
	assert.Equal(t, job.StateFailed, r.State)
	assert.Contains(t, r.Error, "killed")
	require.Len(t, r.Attempts, 1)
	assert.Equal(t, job.ReasonLeaseLost, r.Attempts[0].Reason)
}

// slowCreate delays container creation, as a loaded engine does.
type slowCreate struct {
	sandbox.DockerClient
	delay time.Duration
}

func (s slowCreate) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	// sleep: the injected fault is the latency itself (an engine that does not heed ctx).
	time.Sleep(s.delay)
	return s.DockerClient.ContainerCreate(ctx, o)
}

func TestVolumeLeaseLostWhileStarting(t *testing.T) {
	wrapDocker = func(d sandbox.DockerClient) sandbox.DockerClient { return slowCreate{d, 3 * time.Second} }
	defer func() { wrapDocker = nil }()
	s, root := volumeStack(t, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := s.client.Submit(ctx, job.Spec{Command: "touch /workspace/ran",
		Volume: &job.Volume{Name: "early", Mode: job.VolumeRW}})
	require.NoError(t, err)
	stealLease(t, s, "early") // the container is still being created
	r, err := s.client.Wait(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, job.ReasonLeaseLost, r.Reason, r.Error)
	assert.Contains(t, r.Error, "did not run")
	assert.Equal(t, 1, r.Runs, "a job whose lease was stolen is not run again")
	_, err = os.Stat(filepath.Join(root, "default.early", "ran"))
	assert.True(t, os.IsNotExist(err), "the command must not have run")
}

// onMountedCreate runs f as a container with a bind mount of the job's
// volume is created (a pool container has none), then delays creation.
type onMountedCreate struct {
	sandbox.DockerClient
	f     func()
	delay time.Duration
}

func (s onMountedCreate) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	for _, m := range o.HostConfig.Mounts {
		if m.Target == sandbox.WorkspaceDir {
			s.f()
			// sleep: the injected fault is the latency itself (an engine that does not heed ctx).
			time.Sleep(s.delay)
		}
	}
	return s.DockerClient.ContainerCreate(ctx, o)
}

// A volume that goes past its quota while the container is still being
// made (walk mode) ends the job as fsize, once: it is never handed back to the queue
// (a re-run would start from the bigger size and be let through).
func TestVolumeQuotaWhileStarting(t *testing.T) {
	var root string
	wrapDocker = func(d sandbox.DockerClient) sandbox.DockerClient {
		return onMountedCreate{d, func() {
			_ = os.WriteFile(filepath.Join(root, "default.grow", "planted"), make([]byte, 2<<20), 0o644)
		}, 2500 * time.Millisecond}
	}
	defer func() { wrapDocker = nil }()
	s, r0 := volumeStackQuota(t, 0, worker.QuotaWalk) // a host-side write: the walk's case
	root = r0
	r := s.run(job.Spec{Command: "touch /workspace/ran", Volume: &job.Volume{Name: "grow", Mode: job.VolumeRW, MaxBytes: 1 << 20}})
	assert.Equal(t, job.ReasonFsize, r.Reason, r.Error)
	assert.Contains(t, r.Error, "quota")
	assert.Equal(t, 1, r.Runs, "a job killed by its quota is not run again")
	assert.NoFileExists(t, filepath.Join(root, "default.grow", "ran"), "the command must not have run")
}

func TestVolumeReadOnly(t *testing.T) {
	s, root := volumeStack(t, 0)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "default.docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "default.docs", "README"), []byte("shared text\n"), 0o644))
	r := s.run(job.Spec{Command: "cat /workspace/README; echo x > /workspace/new 2>&1 || echo denied",
		Volume: &job.Volume{Name: "docs", Mode: job.VolumeRO}})
	assert.Equal(t, job.StateSucceeded, r.State, r.Error)
	assert.Contains(t, r.Stdout.Text, "shared text")
	assert.Contains(t, r.Stdout.Text+r.Stderr.Text, "denied")
	assert.Zero(t, r.FencingToken)
}

func TestVolumeNameTricksRejected(t *testing.T) {
	s, _ := volumeStack(t, 0)
	r := s.run(job.Spec{Command: "ls /workspace", Volume: &job.Volume{Name: "../etc"}})
	assert.Equal(t, job.StateRejected, r.State)
	assert.Equal(t, "volume.name", r.Errors[0].Field)
}
