package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/tenant"
)

// ioFleet is an operator-mode NATS server (the real embedded server)
// trusting a fresh tenant.Authority: tenants connect with the credentials
// `paddock tenant add` issues (tenant.RoleTenant, the real grant), and an
// admin connection plays the fleet (it creates the tenants' stores as the
// scheduler does and writes output as the worker does).
type ioFleet struct {
	t    *testing.T
	srv  *server.Server
	auth *tenant.Authority
	js   jetstream.JetStream
}

// startIOFleet starts the server and creates the stores of tenants, sized
// by quota.
func startIOFleet(t *testing.T, quota results.StoreQuota, tenants ...string) *ioFleet {
	t.Helper()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: filepath.Join(dir, "js"), NoLog: true, NoSigs: true}
	require.NoError(t, a.ConfigureServer(opts, filepath.Join(dir, "accounts")))
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	f := &ioFleet{t: t, srv: srv, auth: a}
	f.push()
	admin, _, err := a.IssueUser(tenant.RoleAdmin, "", "")
	require.NoError(t, err)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserCredentials(f.writeCreds(admin)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f.js, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, f.js, results.StreamConfig{Stores: quota}))
	for _, tn := range tenants {
		require.NoError(t, results.EnsureTenantStream(ctx, f.js, results.StreamConfig{Stores: quota}, tn, 0))
	}
	return f
}

// push sends the authority's account JWTs to the server.
func (f *ioFleet) push() {
	f.t.Helper()
	sys, _, err := f.auth.IssueSystemUser()
	require.NoError(f.t, err)
	nc, err := nats.Connect(f.srv.ClientURL(), nats.UserCredentials(f.writeCreds(sys)))
	require.NoError(f.t, err)
	defer nc.Close()
	require.NoError(f.t, f.auth.PushAccount(context.Background(), nc))
}

func (f *ioFleet) writeCreds(creds []byte) string {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "user.creds")
	require.NoError(f.t, tenant.WriteCreds(path, creds))
	return path
}

// client connects with tenant creds's credentials through client.Connect
// and returns a client acting as tenant as, and the connection's
// asynchronous errors.
func (f *ioFleet) client(creds, as string) (*client.Client, *asyncErrors) {
	f.t.Helper()
	c, _, err := f.auth.IssueUser(tenant.RoleTenant, creds, "")
	require.NoError(f.t, err)
	f.push() // the tenant's account, made by its first user
	errs := &asyncErrors{}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := client.Connect(context.Background(), client.ConnectConfig{URL: f.srv.ClientURL(), Creds: f.writeCreds(c),
		Tenant: as, Logger: quiet, Options: []nats.Option{errs.handler()}})
	require.NoError(f.t, err)
	f.t.Cleanup(nc.Close)
	cl, err := client.New(nc, client.Config{Tenant: as, Logger: quiet})
	require.NoError(f.t, err)
	f.t.Cleanup(cl.Close)
	return cl, errs
}

// chunk publishes one live output chunk of tenant's job id as the worker
// does.
func (f *ioFleet) chunk(tn, id string, ch client.Chunk) {
	f.t.Helper()
	m := nats.NewMsg(job.OutputSubject(tn, id))
	if ch.End {
		m.Header.Set(job.HeaderOutEnd, string(ch.Reason))
	} else {
		m.Header.Set(job.HeaderOutStream, ch.Stream)
		m.Header.Set(job.HeaderOutSeq, strconv.Itoa(ch.Seq))
		m.Header.Set(job.HeaderOutRun, strconv.Itoa(ch.Run))
		if ch.Skipped > 0 {
			m.Header.Set(job.HeaderOutSkipped, strconv.FormatInt(ch.Skipped, 10))
		}
		m.Data = ch.Data
	}
	_, err := f.js.PublishMsg(context.Background(), m)
	require.NoError(f.t, err)
}

// finish publishes r as tenant's terminal result.
func (f *ioFleet) finish(tn string, r job.Result) job.Result {
	f.t.Helper()
	r.Tenant = tn
	if r.Reason == "" {
		r.Finish(job.ReasonOK)
	}
	data, err := json.Marshal(r)
	require.NoError(f.t, err)
	_, err = f.js.Publish(context.Background(), job.ResultSubject(tn, r.ID), data)
	require.NoError(f.t, err)
	return r
}

// put stores size pseudo-random bytes (seeded by name) as object name of
// bucket and returns their sha256, without holding them in memory.
func (f *ioFleet) put(bucket, name string, size int64) string {
	f.t.Helper()
	obs, err := f.js.ObjectStore(context.Background(), bucket)
	require.NoError(f.t, err)
	h := sha256.New()
	_, err = obs.Put(context.Background(), jetstream.ObjectMeta{Name: name}, io.TeeReader(randBytes(name, size), h))
	require.NoError(f.t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// randBytes is a reader of n deterministic pseudo-random bytes.
func randBytes(seed string, n int64) io.Reader {
	s := sha256.Sum256([]byte(seed))
	return io.LimitReader(rand.NewChaCha8(s), n)
}

// chunks makes n chunks of two runs, stdout and stderr mixed, some with
// skipped bytes, then the end marker.
func chunks(n int) []client.Chunk {
	var out []client.Chunk
	seq := map[int]int{}
	for i := range n {
		run := 1 + i*2/n
		seq[run]++
		ch := client.Chunk{Stream: "stdout", Data: fmt.Appendf(nil, "line %d of run %d\n", i, run), Seq: seq[run], Run: run}
		if i%3 == 1 {
			ch.Stream = "stderr"
		}
		if i%17 == 5 {
			ch.Skipped = int64(1000 + i)
		}
		out = append(out, ch)
	}
	return append(out, client.Chunk{End: true, Reason: job.ReasonExitNonzero})
}

// follow collects what Follow yields, and the error it ends with.
func follow(ctx context.Context, c *client.Client, id string, opts ...client.FollowOption) ([]client.Chunk, error) {
	var got []client.Chunk
	for ch, err := range c.Follow(ctx, id, opts...) {
		if err != nil {
			return got, err
		}
		got = append(got, ch)
	}
	return got, nil
}

// Follow replays every chunk in order and ends at the end marker; NoWait
// ends at the last chunk stored.
func TestFollowYieldsEveryChunkInOrder(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	want := chunks(300)
	for _, ch := range want[:150] {
		f.chunk("ta", "job.1", ch)
	}
	f.chunk("ta", "other", client.Chunk{Stream: "stdout", Data: []byte("not mine"), Seq: 1, Run: 1})

	got, err := follow(ctx, c, "job.1", client.NoWait())
	require.NoError(t, err, "NoWait ends at the last stored chunk without error")
	assert.Equal(t, want[:150], got)

	done := make(chan []client.Chunk, 1)
	go func() {
		got, err := follow(ctx, c, "job.1")
		assert.NoError(t, err)
		done <- got
	}()
	for _, ch := range want[150:] {
		f.chunk("ta", "job.1", ch)
	}
	assert.Equal(t, want, <-done, "replayed from the start, then live, to the end marker")

	got, err = follow(ctx, c, "job.1", client.NoWait())
	require.NoError(t, err)
	assert.Equal(t, want, got, "NoWait of a job whose live output is complete")
	// Breaking out of the range early ends the follow.
	for _, err := range c.Follow(ctx, "job.1") {
		require.NoError(t, err)
		break
	}
	st, err := f.js.Stream(ctx, job.OutputStream("ta"))
	require.NoError(t, err)
	assert.Zero(t, st.CachedInfo().State.Consumers, "no follow made a consumer")
	assert.Empty(t, errs.list(), "the tenant's grant sufficed")
}

// A Follow started before the job's first chunk gets everything.
func TestFollowStartedBeforeTheFirstChunk(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	done := make(chan []client.Chunk, 1)
	subs := f.srv.NumSubscriptions()
	go func() {
		got, err := follow(ctx, c, "early")
		assert.NoError(t, err)
		done <- got
	}()
	require.Eventually(t, func() bool { return f.srv.NumSubscriptions() > subs }, wait, 5*time.Millisecond,
		"the follow subscribed to the job's live subject")
	want := chunks(50)
	for _, ch := range want {
		f.chunk("ta", "early", ch)
	}
	assert.Equal(t, want, <-done)
	assert.Empty(t, errs.list())
}

// A finished job with no live output (expired, or from before live
// output) ends Follow with ErrNoLiveOutput, not a hang; one whose end
// marker is missing ends so after its chunks; cancelling ctx ends a follow
// of a job still running.
func TestFollowWithoutLiveOutputEnds(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	_, err := follow(ctx, c, "never", client.NoWait())
	require.ErrorIs(t, err, client.ErrNoLiveOutput, "NoWait with nothing stored")

	f.finish("ta", job.Result{ID: "quiet"})
	start := time.Now()
	got, err := follow(ctx, c, "quiet")
	require.ErrorIs(t, err, client.ErrNoLiveOutput)
	assert.Empty(t, got)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, err.Error(), "holds none of its output")

	want := chunks(5)
	for _, ch := range want[:3] {
		f.chunk("ta", "cut", ch)
	}
	f.finish("ta", job.Result{ID: "cut"})
	got, err = follow(ctx, c, "cut")
	require.ErrorIs(t, err, client.ErrNoLiveOutput)
	assert.Equal(t, want[:3], got)
	assert.Contains(t, err.Error(), "after 3 chunks")

	running, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	f.chunk("ta", "running", want[0])
	got, err = follow(running, c, "running")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, want[:1], got)
	assert.Empty(t, errs.list())
}

// A rescued job's result names run 2's objects; a stale run 1 that
// resumed and uploaded after the rescue wrote run 1's names. Output and
// Artifact serve the objects the result names, never the stale run's.
func TestOutputAndArtifactFollowTheResultsRun(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, _ := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	out := job.OutBucket("ta")
	f.put(out, job.StdoutObject("resc", 1), 1000) // the stale run's
	f.put(out, job.ArtifactObject("resc", 1, "r.txt"), 100)
	sum := f.put(out, job.StdoutObject("resc", 2), 2000)
	asum := f.put(out, job.ArtifactObject("resc", 2, "r.txt"), 200)
	f.finish("ta", job.Result{ID: "resc", Runs: 2,
		Kept:      &job.Kept{Stdout: job.Object{Name: job.StdoutObject("resc", 2), Bytes: 2000, SHA256: sum}},
		Artifacts: []job.Object{{Name: job.ArtifactObject("resc", 2, "r.txt"), Path: "r.txt", Bytes: 200, SHA256: asum}}})
	for name, open := range map[string]func() (io.ReadCloser, error){
		"output":   func() (io.ReadCloser, error) { return c.Output(ctx, "resc", "stdout") },
		"artifact": func() (io.ReadCloser, error) { return c.Artifact(ctx, "resc", "r.txt") },
	} {
		rc, err := open()
		require.NoError(t, err, name)
		h := sha256.New()
		_, err = io.Copy(h, rc)
		require.NoError(t, err, name)
		require.NoError(t, rc.Close())
		assert.Contains(t, []string{sum, asum}, hex.EncodeToString(h.Sum(nil)), "%s: served the stale run's object", name)
	}
}

// Output streams a 64 MiB kept object byte-exact; reading part of it and
// closing is fine; a missing one says why.
func TestOutputStreamsKeptOutput(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	const size = 64 << 20
	sum := f.put(job.OutBucket("ta"), job.StdoutObject("big", 1), size)
	f.finish("ta", job.Result{ID: "big", Kept: &job.Kept{
		Stdout: job.Object{Name: job.StdoutObject("big", 1), Bytes: size, SHA256: sum},
		Stderr: job.Object{Note: "the job printed nothing on stderr"}}})

	rc, err := c.Output(context.Background(), "big", "stdout") // no deadline: none on the read
	require.NoError(t, err)
	h := sha256.New()
	n, err := io.Copy(h, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	assert.Equal(t, int64(size), n)
	assert.Equal(t, sum, hex.EncodeToString(h.Sum(nil)), "byte-exact")

	rc, err = c.Output(ctx, "big", "stdout")
	require.NoError(t, err)
	head := make([]byte, 1<<20)
	_, err = io.ReadFull(rc, head)
	require.NoError(t, err)
	require.NoError(t, rc.Close(), "closing a partly read output")
	want, _ := io.ReadAll(io.LimitReader(randBytes(job.StdoutObject("big", 1), size), 1<<20))
	assert.True(t, bytes.Equal(want, head))

	_, err = c.Output(ctx, "big", "stderr")
	var nk *client.NotKeptError
	require.ErrorAs(t, err, &nk)
	assert.Equal(t, client.NotKeptError{ID: "big", What: "stderr", Finished: true, Note: "the job printed nothing on stderr"}, *nk)
	_, err = c.Output(ctx, "running", "stdout")
	require.ErrorAs(t, err, &nk)
	assert.False(t, nk.Finished)
	assert.Contains(t, err.Error(), "no result yet")
	f.finish("ta", job.Result{ID: "plain"})
	_, err = c.Output(ctx, "plain", "stdout")
	require.ErrorIs(t, err, client.ErrNotKept)
	assert.Contains(t, err.Error(), "--keep-output")
	_, err = c.Output(ctx, "big", "stdin")
	require.ErrorIs(t, err, client.ErrConfig)
	assert.Empty(t, errs.list())
}

// Artifacts lists what the result names; Artifact reads only those, and
// checks the bytes against the result.
func TestArtifacts(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	out := job.OutBucket("ta")
	sum := f.put(out, job.ArtifactObject("art", 1, "dist/app.tar"), 300_000)
	f.put(out, job.ArtifactObject("art", 1, "secret.txt"), 10) // in the bucket, not in the result
	f.put(out, job.ArtifactObject("art", 1, "lied.bin"), 100)
	objs := []job.Object{
		{Name: job.ArtifactObject("art", 1, "dist/app.tar"), Path: "dist/app.tar", Bytes: 300_000, SHA256: sum},
		{Name: job.ArtifactObject("art", 1, "lied.bin"), Path: "lied.bin", Bytes: 100, SHA256: sum},
		{Name: job.ArtifactObject("art", 1, "gone.txt"), Path: "gone.txt", Bytes: 1, SHA256: sum},
	}
	refused := []job.Refusal{{Path: "big.iso", Reason: "larger than the per-artifact cap"}}
	f.finish("ta", job.Result{ID: "art", Artifacts: objs, Refused: refused})

	gotObjs, gotRefused, err := c.Artifacts(ctx, "art")
	require.NoError(t, err)
	assert.Equal(t, objs, gotObjs)
	assert.Equal(t, refused, gotRefused)

	rc, err := c.Artifact(ctx, "art", "dist/app.tar")
	require.NoError(t, err)
	data, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	want, _ := io.ReadAll(randBytes(job.ArtifactObject("art", 1, "dist/app.tar"), 300_000))
	assert.True(t, bytes.Equal(want, data))

	rc, err = c.Artifact(ctx, "art", "lied.bin")
	require.NoError(t, err)
	_, err = io.ReadAll(rc)
	require.Error(t, err, "bytes that are not the result's sha256 fail at the end")
	assert.Contains(t, err.Error(), "its job's result names")
	_ = rc.Close()

	for path, target := range map[string]error{"secret.txt": client.ErrNotArtifact, "big.iso": client.ErrNotArtifact,
		"gone.txt": client.ErrNotKept, "../art/secret.txt": job.ErrInvalid, "/etc/passwd": job.ErrInvalid} {
		_, err := c.Artifact(ctx, "art", path)
		assert.ErrorIs(t, err, target, path)
	}
	_, err = c.Artifact(ctx, "art", "big.iso")
	assert.ErrorContains(t, err, "refused: larger than the per-artifact cap")
	_, _, err = c.Artifacts(ctx, "unfinished")
	assert.ErrorIs(t, err, client.ErrNotFinished)
	assert.Empty(t, errs.list())
}

// Put streams an upload into the tenant's input bucket, byte-exact; over
// the bucket's size it fails with the typed quota error and leaves
// nothing.
func TestPut(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{StoredMaxBytes: 8 << 20}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const size = 3<<20 + 17
	obj, err := c.Put(ctx, "in/data/set.bin", randBytes("upload", size))
	require.NoError(t, err)
	h := sha256.New()
	_, _ = io.Copy(h, randBytes("upload", size))
	assert.Equal(t, job.Object{Name: "in/data/set.bin", Bytes: size, SHA256: hex.EncodeToString(h.Sum(nil))}, obj)

	obs, err := f.js.ObjectStore(ctx, job.InBucket("ta"))
	require.NoError(t, err)
	res, err := obs.Get(ctx, "in/data/set.bin")
	require.NoError(t, err)
	h.Reset()
	_, err = io.Copy(h, res)
	require.NoError(t, err)
	assert.Equal(t, obj.SHA256, hex.EncodeToString(h.Sum(nil)), "the fleet reads back the same bytes")
	_ = res.Close()

	again, err := c.Put(ctx, "in/data/set.bin", bytes.NewReader([]byte("replaced")))
	require.NoError(t, err, "a put replaces an object of the same name")
	assert.Equal(t, int64(8), again.Bytes)

	_, err = c.Put(ctx, "in/too-big", randBytes("big", 9<<20))
	require.ErrorIs(t, err, client.ErrBucketFull)
	require.ErrorIs(t, err, client.ErrQuota)
	var bf *client.BucketFullError
	require.ErrorAs(t, err, &bf)
	assert.Equal(t, job.InBucket("ta"), bf.Bucket)
	_, err = obs.GetInfo(ctx, "in/too-big")
	assert.ErrorIs(t, err, jetstream.ErrObjectNotFound)
	st, err := f.js.Stream(ctx, "OBJ_"+job.InBucket("ta"))
	require.NoError(t, err)
	assert.Less(t, st.CachedInfo().State.Bytes, uint64(1<<20), "the refused upload's chunks were purged")

	_, err = c.Put(ctx, "in/data/set.bin", randBytes("big", 9<<20))
	require.ErrorIs(t, err, client.ErrBucketFull, "replacing an object with one too big")
	kept, err := obs.GetString(ctx, "in/data/set.bin")
	require.NoError(t, err, "the replaced object is back, whole")
	assert.Equal(t, "replaced", kept)

	for _, ref := range []string{"", "/abs", "a/../b", "sp ace"} {
		_, err := c.Put(ctx, ref, bytes.NewReader(nil))
		assert.ErrorIs(t, err, job.ErrInvalid, ref)
	}
	assert.Empty(t, errs.list())
}

// Tenant tb's credentials reach nothing of tenant ta's agent I/O: the SDK
// acting as ta on tb's credentials is refused at once, raw JetStream calls
// get no data, and tb's own client sees none of ta's output. And a tenant
// cannot write or remove its own output stream and output bucket.
func TestIOTenantCannotReachAnotherTenant(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta", "tb")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	f.chunk("ta", "secret", client.Chunk{Stream: "stdout", Data: []byte("ta's secret"), Seq: 1, Run: 1})
	f.chunk("ta", "secret", client.Chunk{End: true, Reason: job.ReasonOK})
	sum := f.put(job.OutBucket("ta"), job.StdoutObject("secret", 1), 1000)
	f.put(job.OutBucket("ta"), job.ArtifactObject("secret", 1, "a.txt"), 1000)
	f.finish("ta", job.Result{ID: "secret", Kept: &job.Kept{Stdout: job.Object{Name: job.StdoutObject("secret", 1), Bytes: 1000, SHA256: sum}},
		Artifacts: []job.Object{{Name: job.ArtifactObject("secret", 1, "a.txt"), Path: "a.txt", Bytes: 1000, SHA256: sum}}})

	intruder, _ := f.client("tb", "ta")
	refused(t, "Follow", func() error { _, err := follow(ctx, intruder, "secret"); return err })
	refused(t, "Follow NoWait", func() error { _, err := follow(ctx, intruder, "secret", client.NoWait()); return err })
	refused(t, "Output", func() error { _, err := intruder.Output(ctx, "secret", "stdout"); return err })
	refused(t, "Artifact", func() error { _, err := intruder.Artifact(ctx, "secret", "a.txt"); return err })
	refused(t, "Artifacts", func() error { _, _, err := intruder.Artifacts(ctx, "secret"); return err })
	refused(t, "Put", func() error { _, err := intruder.Put(ctx, "x", bytes.NewReader([]byte("x"))); return err })

	own, _ := f.client("tb", "tb")
	_, err := follow(ctx, own, "secret", client.NoWait())
	require.ErrorIs(t, err, client.ErrNoLiveOutput, "tb's job secret is not ta's")
	_, err = own.Output(ctx, "secret", "stdout")
	require.ErrorIs(t, err, client.ErrNotKept)

	rawCalls(t, f, ctx)
}

// rawCalls tries ta's stores, and the parts of tb's own that only the
// fleet may change, with tb's credentials and the plain JetStream API.
func rawCalls(t *testing.T, f *ioFleet, ctx context.Context) {
	creds, _, err := f.auth.IssueUser(tenant.RoleTenant, "tb", "")
	require.NoError(t, err)
	var errs asyncErrors
	nc, err := nats.Connect(f.srv.ClientURL(), nats.UserCredentials(f.writeCreds(creds)),
		nats.CustomInboxPrefix(job.InboxPrefix("tb")), errs.handler())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	require.NoError(t, err)
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	_, err = js.OrderedConsumer(short(), job.OutputStream("ta"), jetstream.OrderedConsumerConfig{})
	assert.Error(t, err, "a consumer on ta's output stream")
	_, err = js.ObjectStore(short(), job.OutBucket("ta"))
	assert.Error(t, err, "ta's output bucket")
	_, err = js.ObjectStore(short(), job.InBucket("ta"))
	assert.Error(t, err, "ta's input bucket")
	m, err := nc.RequestWithContext(short(), "$JS.API.DIRECT.GET."+job.OutputStream("ta")+"."+job.OutputSubject("ta", "secret"), nil)
	assert.Error(t, err, "a direct get of ta's output: %v", m)

	for name, op := range map[string]func() error{
		"delete its output stream": func() error { return js.DeleteStream(short(), job.OutputStream("tb")) },
		"purge its output stream":  func() error { st, _ := js.Stream(short(), job.OutputStream("tb")); return purge(short(), st) },
		"delete its output bucket": func() error { return js.DeleteObjectStore(short(), job.OutBucket("tb")) },
		"write its output bucket": func() error {
			obs, err := js.ObjectStore(short(), job.OutBucket("tb"))
			if err != nil {
				return err
			}
			_, err = obs.PutBytes(short(), job.StdoutObject("forged", 1), []byte("forged"))
			return err
		},
		"publish live output": func() error {
			_, err := js.Publish(short(), job.OutputSubject("tb", "forged"), []byte("forged"))
			return err
		},
	} {
		assert.Error(t, op(), name)
	}
	for _, st := range []string{job.OutputStream("tb"), "OBJ_" + job.OutBucket("tb")} {
		s, err := f.js.Stream(ctx, st)
		require.NoError(t, err, "%s is still there", st)
		assert.Zero(t, s.CachedInfo().State.Msgs, "%s holds nothing forged", st)
	}
}

func purge(ctx context.Context, st jetstream.Stream) error {
	if st == nil {
		return errors.New("no stream handle")
	}
	return st.Purge(ctx)
}

// Follow a job's output as it runs: stdout and stderr chunks in order,
// then the end marker. A job whose live output is gone (it expired, or the
// job ended before anyone followed it) ends with ErrNoLiveOutput: its kept
// output, or its result, has what is left.
func ExampleClient_Follow() {
	ctx := context.Background()
	nc, err := client.Connect(ctx, client.ConnectConfig{URL: "nats://nats.example.com:4222", Creds: "ci.creds", Tenant: "ci"})
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{Tenant: "ci"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	keep := true
	sub, err := c.Submit(ctx, job.Spec{Command: "make test", Output: &job.OutputPolicy{Keep: &keep}})
	if err != nil {
		panic(err)
	}
	for ch, err := range c.Follow(ctx, sub.ID) {
		switch {
		case errors.Is(err, client.ErrNoLiveOutput):
			rc, err := c.Output(ctx, sub.ID, "stdout") // the complete stdout, kept
			if err != nil {
				panic(err)
			}
			_, _ = io.Copy(os.Stdout, rc)
			rc.Close()
		case err != nil:
			panic(err)
		case ch.End:
			fmt.Println("ended:", ch.Reason)
		case ch.Stream == "stderr":
			os.Stderr.Write(ch.Data)
		default:
			if ch.Skipped > 0 {
				fmt.Fprintf(os.Stderr, "[… %d bytes skipped]\n", ch.Skipped)
			}
			os.Stdout.Write(ch.Data)
		}
	}
}

// Upload a file once and give it to jobs by reference: it is written
// under each job's workspace before the command runs.
func ExampleClient_Put() {
	ctx := context.Background()
	nc, err := client.Connect(ctx, client.ConnectConfig{URL: "nats://nats.example.com:4222", Creds: "ci.creds", Tenant: "ci"})
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{Tenant: "ci"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	f, err := os.Open("testdata.tar.gz")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	obj, err := c.Put(ctx, "inputs/testdata.tar.gz", f)
	if errors.Is(err, client.ErrBucketFull) {
		fmt.Println("the tenant's upload quota is used up; try again once older uploads expire")
		return
	}
	if err != nil {
		panic(err)
	}
	fmt.Println(obj.Name, obj.Bytes, obj.SHA256)
	_, err = c.Submit(ctx, job.Spec{
		Command: "tar xzf testdata.tar.gz && make test",
		Files:   []job.File{{Path: "testdata.tar.gz", Ref: obj.Name}},
	})
	if err != nil {
		panic(err)
	}
}
