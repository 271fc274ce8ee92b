package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/objput"
	"github.com/paddockhq/paddock/internal/streamfull"
	"github.com/paddockhq/paddock/job"
)

// Agent I/O (job/io.go): a job's live output, its kept output and
// artifacts, and the tenant's uploads. Everything is the client's
// tenant's: its live output stream (job.OutputStream), its output bucket
// (job.OutBucket, read only) and its input bucket (job.InBucket).

var (
	// ErrNoLiveOutput: Follow found no (more) live output of a finished
	// job: its chunks expired from the stream (short retention), or the job
	// ran before live output existed. Its kept output (Output) or its
	// result's text has what is left.
	ErrNoLiveOutput = errors.New("client: no live output")
	// ErrNotKept is matched (errors.Is) by a *NotKeptError.
	ErrNotKept = errors.New("client: output not kept")
	// ErrNotArtifact: Artifact was asked for a path the job's result does
	// not list among its artifacts.
	ErrNotArtifact = errors.New("client: not an artifact of the job")
	// ErrBucketFull is matched (errors.Is) by a *BucketFullError.
	ErrBucketFull = errors.New("client: tenant bucket full")
)

// NotKeptError reports an object that is not in the tenant's output
// bucket: the job has not finished, it did not keep its output, the fleet
// could not keep it (Note says why), or it expired.
type NotKeptError struct {
	ID string
	// What is "stdout", "stderr", or "artifact <path>".
	What string
	// Finished: the job has a result.
	Finished bool
	// Note is the result's note on the object (job.Object.Note), if any.
	Note string
	// Expired: the result names the object but the bucket no longer has
	// it (its TTL, the result retention, passed; or it was removed).
	Expired bool
}

func (e *NotKeptError) Error() string {
	switch {
	case !e.Finished:
		return fmt.Sprintf("client: no kept %s of job %s: the job has no result yet (output is kept when it ends), or the id is unknown", e.What, e.ID)
	case e.Expired:
		return fmt.Sprintf("client: the %s of job %s was kept but is no longer in the bucket (expired or removed)", e.What, e.ID)
	case e.Note != "":
		return fmt.Sprintf("client: the %s of job %s was not kept: %s", e.What, e.ID, e.Note)
	}
	return fmt.Sprintf("client: the %s of job %s was not kept: the job did not ask for it "+
		"(Spec.Output.Keep; CLI: submit --keep-output) and the fleet does not keep output by default", e.What, e.ID)
}

// Is makes errors.Is(err, ErrNotKept) true.
func (e *NotKeptError) Is(target error) bool { return target == ErrNotKept }

// BucketFullError reports an upload the tenant's input bucket refused: it
// holds the tenant's quota of bytes (results.StoreQuota.StoredMaxBytes),
// or the server's JetStream storage is used up. Nothing of the upload is
// left in the bucket. It matches ErrBucketFull and ErrQuota.
type BucketFullError struct {
	Tenant string
	Bucket string
	Name   string // the object's name (Put's ref)
	Err    error  // what NATS answered
}

func (e *BucketFullError) Error() string {
	return fmt.Sprintf("client: upload %s: tenant %q's bucket %s is full (%v): nothing was stored; "+
		"wait for older uploads to expire, or have the operator raise the tenant's storage quota",
		e.Name, e.Tenant, e.Bucket, e.Err)
}

// Is makes errors.Is(err, ErrBucketFull) and errors.Is(err, ErrQuota)
// true.
func (e *BucketFullError) Is(target error) bool { return target == ErrBucketFull || target == ErrQuota }

func (e *BucketFullError) Unwrap() error { return e.Err }

// Chunk is one message of a job's live output.
type Chunk struct {
	// Stream is "stdout" or "stderr" ("" on the end marker).
	Stream string
	Data   []byte
	// Seq numbers the chunks of one run from 1; Run is the job's run
	// (job.Result.Runs) the chunk is from.
	Seq, Run int
	// Skipped counts the bytes of Stream dropped just before this chunk
	// (the job printed faster than the fleet's live rate bound; the kept
	// output has them).
	Skipped int64
	// End marks the last message of the job's live output; Reason is then
	// the job's reason.
	End    bool
	Reason job.Reason
}

// FollowOption changes what Follow does.
type FollowOption func(*followConfig)

type followConfig struct{ noWait bool }

// NoWait makes Follow yield only the chunks the stream holds when it
// starts and then end (with no error) instead of waiting for the job's
// end; with no chunk stored it ends with ErrNoLiveOutput.
func NoWait() FollowOption { return func(c *followConfig) { c.noWait = true } }

// Bounds of Follow's waiting.
const (
	// followIdleFirst and followIdleMax space Follow's checks for the job's
	// result while no chunk arrives, doubling from the first to the last.
	followIdleFirst = 250 * time.Millisecond
	followIdleMax   = 5 * time.Second
	// followSettle is how long Follow keeps reading after it saw the job's
	// result (its end marker may still be on its way) before it concludes
	// that no more live output will come.
	followSettle = time.Second
)

// Follow yields the live output of the tenant's job id, from the first
// chunk the tenant's output stream holds, in order, and ends after the
// end marker (a Chunk with End set). It reads the stream with direct gets
// of job.OutputSubject from the stream's start, woken by the chunks'
// publication (no consumer: see direct.go): started before the job prints,
// it gets everything; started after, it replays what the stream kept. When the job has a result and no more chunks come, it ends
// with an error matching ErrNoLiveOutput instead of waiting forever (the
// chunks expired, or the job ran before live output existed). An error
// ends the sequence: it is yielded once, with a zero Chunk; cancelling
// ctx ends it with ctx's error. Each range over the sequence follows
// afresh. Stopping the range early releases its subscription.
func (c *Client) Follow(ctx context.Context, id string, opts ...FollowOption) iter.Seq2[Chunk, error] {
	var cfg followConfig
	for _, o := range opts {
		o(&cfg)
	}
	return func(yield func(Chunk, error) bool) {
		f, err := c.startFollow(ctx, id, cfg)
		if err != nil {
			yield(Chunk{}, err)
			return
		}
		defer f.stop()
		for {
			ch, last, err := f.next()
			if errors.Is(err, errCaughtUp) {
				return
			}
			if err != nil {
				yield(Chunk{}, err)
				return
			}
			if !yield(ch, nil) || ch.End || last {
				return
			}
		}
	}
}

// errCaughtUp ends a NoWait Follow that yielded what was stored.
var errCaughtUp = errors.New("caught up")

// follower is one range over Follow. It reads the output stream with
// direct gets from its own position (direct.go); a subscription to the
// job's live subject only wakes it when a chunk is published.
type follower struct {
	c        *Client
	ctx      context.Context
	id       string
	stream   string
	subject  string
	sub      *nats.Subscription
	wake     chan struct{} // a live chunk was published (capacity 1)
	seq      uint64        // the stream sequence the next chunk is looked for at
	noWait   bool
	got      int           // chunks yielded
	idle     time.Duration // the current wait for a chunk
	retry    time.Duration // after a wake-up that found nothing yet; 0: none
	lastMsg  time.Time
	finished time.Time // when the job's result was first seen; zero before
}

// Bounds of the re-reads after a wake-up: the subscriber can hear of a
// chunk just before the stream has stored it.
const (
	followRetryFirst = 2 * time.Millisecond
	followRetryMax   = 100 * time.Millisecond
)

// startFollow subscribes to the job's live subject, then checks, with one
// direct get, that the tenant may read its output stream and whether it
// holds anything of id (a refused request fails at once).
func (c *Client) startFollow(ctx context.Context, id string, cfg followConfig) (*follower, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	f := &follower{c: c, ctx: ctx, id: id, stream: job.OutputStream(c.tenant), subject: job.OutputSubject(c.tenant, id),
		wake: make(chan struct{}, 1), seq: 1, noWait: cfg.noWait, idle: followIdleFirst, lastMsg: time.Now()}
	if !cfg.noWait {
		sub, err := c.nc.Subscribe(f.subject, func(*nats.Msg) {
			select {
			case f.wake <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return nil, fmt.Errorf("client: follow %s: %w", id, err)
		}
		f.sub = sub
	}
	lctx, cancel := c.withTimeout(ctx)
	defer cancel()
	_, found, err := c.directLast(lctx, f.stream, f.subject)
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("client: follow %s: %w", id, err)
	}
	if !found && cfg.noWait {
		return nil, fmt.Errorf("%w: the live output stream holds nothing of job %s (it has printed nothing yet, or its output expired)", ErrNoLiveOutput, id)
	}
	return f, nil
}

// next returns the next chunk; last is never true (a NoWait follow ends
// with errCaughtUp at the first read that finds nothing more).
func (f *follower) next() (ch Chunk, last bool, err error) {
	for {
		rctx, cancel := f.c.withTimeout(f.ctx)
		msg, next, found, err := f.c.directNext(rctx, f.stream, f.subject, f.seq)
		cancel()
		switch {
		case err != nil && f.ctx.Err() != nil:
			return Chunk{}, false, fmt.Errorf("client: follow %s: %w", f.id, f.ctx.Err())
		case err != nil:
			return Chunk{}, false, fmt.Errorf("client: follow %s: %w", f.id, err)
		case found:
			f.seq = next
			f.got++
			f.idle, f.retry, f.lastMsg = followIdleFirst, 0, time.Now()
			return liveChunk(msg.Header, msg.Data), false, nil
		case f.noWait:
			return Chunk{}, false, errCaughtUp
		}
		if err := f.wait(); err != nil {
			return Chunk{}, false, err
		}
	}
}

// wait waits for a wake-up, a retry after one, or f.idle; after f.idle
// with nothing it runs quiet.
func (f *follower) wait() error {
	d := f.idle
	if f.retry > 0 {
		d = f.retry
		if f.retry *= 2; f.retry > followRetryMax {
			f.retry = 0
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.ctx.Done():
		return fmt.Errorf("client: follow %s: %w", f.id, f.ctx.Err())
	case <-f.wake:
		f.retry = followRetryFirst
		return nil
	case <-t.C:
	}
	if d < f.idle {
		return nil // a retry: read again
	}
	return f.quiet()
}

// quiet runs when no chunk came for f.idle: it ends a NoWait follow, and
// otherwise looks for the job's result; once the result has been known
// for followSettle with no chunk since, no more live output will come.
func (f *follower) quiet() error {
	if f.noWait {
		return errCaughtUp
	}
	if f.finished.IsZero() {
		ctx, cancel := f.c.withTimeout(f.ctx)
		_, ok, err := f.c.lookup(ctx, f.id)
		cancel()
		switch {
		case ok:
			f.finished = time.Now()
		case errors.Is(err, ErrPermission) || errors.Is(err, ErrNoStream) && f.c.nc.IsConnected():
			return fmt.Errorf("client: follow %s: %w", f.id, err)
		case err != nil && f.ctx.Err() == nil:
			f.c.log.Debug("result look-up failed; looking again later", "job", f.id, "err", err)
		}
	}
	if !f.finished.IsZero() && time.Since(f.finished) >= followSettle && time.Since(f.lastMsg) >= followSettle {
		if f.got == 0 {
			return fmt.Errorf("%w: job %s has finished and the live output stream holds none of its output "+
				"(it expired, or the job ran before live output existed): read its kept output or its result", ErrNoLiveOutput, f.id)
		}
		return fmt.Errorf("%w: job %s has finished but its live output stopped after %d chunks without the end marker "+
			"(the rest expired from the stream): read its kept output or its result", ErrNoLiveOutput, f.id, f.got)
	}
	f.idle = min(2*f.idle, followIdleMax)
	return nil
}

// stop ends the wake-up subscription.
func (f *follower) stop() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
}

// directLast reads the last message on subject in stream with a direct
// get (the stream allows them), through request: a refused request fails
// at once. found is false when the stream holds none.
func (c *Client) directLast(ctx context.Context, stream, subject string) (*nats.Msg, bool, error) {
	api := "$JS.API.DIRECT.GET." + stream + "."
	reply, err := c.request(ctx, &nats.Msg{Subject: api + subject}, api)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, false, &NoStreamError{Stream: stream, Tenant: c.tenant, Err: err}
	case errors.Is(err, ErrPermission):
		return nil, false, err
	case err != nil:
		return nil, false, fmt.Errorf("read %s: %w", stream, err)
	}
	if status := reply.Header.Get("Status"); len(reply.Data) == 0 && status != "" {
		if status == "404" {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("read %s: JetStream answered %s %s", stream, status, reply.Header.Get("Description"))
	}
	return reply, true, nil
}

// objMeta is the meta of an object as stored (what the Object Store's
// GetInfo reads).
type objMeta struct {
	info jetstream.ObjectInfo
}

// objectMeta reads the meta of object name in bucket with a direct get;
// nil when there is none (a deleted object's is returned, Deleted set).
func (c *Client) objectMeta(ctx context.Context, bucket, name string) (*objMeta, error) {
	msg, found, err := c.directLast(ctx, "OBJ_"+bucket, metaSubject(bucket, name))
	if err != nil || !found {
		return nil, err
	}
	m := &objMeta{}
	if err := json.Unmarshal(msg.Data, &m.info); err != nil {
		return nil, fmt.Errorf("object %s of bucket %s: malformed meta: %w", name, bucket, err)
	}
	return m, nil
}

// metaSubject is the subject of the meta of object name in bucket.
func metaSubject(bucket, name string) string {
	return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// objectInfo reports whether object name is in bucket (not deleted).
func (c *Client) objectInfo(ctx context.Context, bucket, name string) (bool, error) {
	m, err := c.objectMeta(ctx, bucket, name)
	return m != nil && !m.info.Deleted, err
}

// objectStore binds bucket once per client (a stream info request).
func (c *Client) objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if obs, ok := c.stores.Load(bucket); ok {
		return obs.(jetstream.ObjectStore), nil
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	obs, err := c.js.ObjectStore(ctx, bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return nil, &NoStreamError{Stream: "OBJ_" + bucket, Tenant: c.tenant, Err: err}
	case err != nil && timedOut(err):
		if perr := c.deniedAny("$JS.API.STREAM.INFO.OBJ_" + bucket); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("client: bucket %s: %w", bucket, err)
	case err != nil:
		return nil, fmt.Errorf("client: bucket %s: %w", bucket, err)
	}
	c.stores.Store(bucket, obs)
	return obs, nil
}

// Output returns the kept stdout or stderr (stream "stdout" or "stderr")
// of the tenant's job id, from the tenant's output bucket: the complete
// output of a job that asked to keep it (Spec.Output.Keep, or the
// operator's default). The object is the one the job's result names (each
// run writes its own: job.StdoutObject), so a stale run's upload is never
// served; without a result in NATS (not finished, or pushed out of a full
// results stream) it is run 1's. The reader streams the object (it is
// never held in memory whole) and fails at its end if the bytes do not
// match the object's digest, and the size and sha256 the result names;
// Close it. ctx bounds the whole read; without a deadline the read has
// none (the look-ups before it take PublishTimeout). An object that is
// not there is a *NotKeptError (errors.Is ErrNotKept) saying why, from the
// job's result.
func (c *Client) Output(ctx context.Context, id, stream string) (io.ReadCloser, error) {
	if err := job.CheckID(id); err != nil {
		return nil, err
	}
	if stream != "stdout" && stream != "stderr" {
		return nil, fmt.Errorf("%w: output stream %q: want stdout or stderr", ErrConfig, stream)
	}
	lctx, cancel := c.withTimeout(ctx)
	defer cancel()
	r, finished, err := c.lookup(lctx, id)
	var noStream *NoStreamError
	if err != nil && !errors.As(err, &noStream) {
		return nil, fmt.Errorf("client: output %s of %s: %w", stream, id, err)
	}
	name, want := job.StdoutObject(id, 1), (*job.Object)(nil)
	if stream == "stderr" {
		name = job.StderrObject(id, 1)
	}
	kept := keptObject(r, finished, stream)
	if strings.HasPrefix(kept.Name, id+"/") {
		name, want = kept.Name, &kept
	}
	bucket := job.OutBucket(c.tenant)
	if ok, err := c.objectInfo(lctx, bucket, name); err != nil {
		return nil, fmt.Errorf("client: output %s of %s: %w", stream, id, err)
	} else if !ok {
		return nil, &NotKeptError{ID: id, What: stream, Finished: finished, Note: kept.Note, Expired: kept.Name != ""}
	}
	return c.download(ctx, bucket, name, want)
}

// keptObject is what result r (when finished) says of its kept stream.
func keptObject(r job.Result, finished bool, stream string) job.Object {
	if !finished || r.Kept == nil {
		return job.Object{}
	}
	if stream == "stderr" {
		return r.Kept.Stderr
	}
	return r.Kept.Stdout
}

// Artifacts returns the artifacts the tenant's job id left and the files
// (or patterns) that were refused, with why, from its result; an error
// wrapping ErrNotFinished when it has none yet.
func (c *Client) Artifacts(ctx context.Context, id string) ([]job.Object, []job.Refusal, error) {
	r, err := c.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return r.Artifacts, r.Refused, nil
}

// Artifact returns the artifact at path (under the workspace) of the
// tenant's job id, which the job's result must list among its artifacts
// (ErrNotArtifact otherwise: no other object of the bucket is reachable
// through it). The reader streams the object like Output's and also fails
// at its end if the bytes are not the size and sha256 the result names.
func (c *Client) Artifact(ctx context.Context, id, path string) (io.ReadCloser, error) {
	if err := job.CheckPath(path); err != nil {
		return nil, &job.ValidationError{Fields: []job.FieldError{{Field: "path", Message: err.Error()}}}
	}
	r, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(r.Artifacts, func(o job.Object) bool { return o.Path == path })
	if i < 0 {
		why := ""
		if j := slices.IndexFunc(r.Refused, func(x job.Refusal) bool { return x.Path == path }); j >= 0 {
			why = ": it was refused: " + r.Refused[j].Reason
		}
		return nil, fmt.Errorf("%w: %q is not among the %d artifacts of job %s%s", ErrNotArtifact, path, len(r.Artifacts), id, why)
	}
	want := r.Artifacts[i]
	bucket, name := job.OutBucket(c.tenant), want.Name
	if !strings.HasPrefix(name, id+"/") {
		name = job.ArtifactObject(id, 1, path) // a result naming no object of this job
	}
	lctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if ok, err := c.objectInfo(lctx, bucket, name); err != nil {
		return nil, fmt.Errorf("client: artifact %s of %s: %w", path, id, err)
	} else if !ok {
		return nil, &NotKeptError{ID: id, What: "artifact " + path, Finished: true, Expired: true}
	}
	return c.download(ctx, bucket, name, &want)
}

// download streams object name of bucket with direct gets (direct.go);
// with want, the bytes must also be want's size and sha256.
func (c *Client) download(ctx context.Context, bucket, name string, want *job.Object) (io.ReadCloser, error) {
	lctx, cancel := c.withTimeout(ctx)
	m, err := c.objectMeta(lctx, bucket, name)
	cancel()
	switch {
	case err != nil:
		return nil, fmt.Errorf("client: get %s from %s: %w", name, bucket, err)
	case m == nil || m.info.Deleted:
		return nil, fmt.Errorf("client: get %s from %s: %w", name, bucket, jetstream.ErrObjectNotFound)
	}
	d := &downloadReader{r: c.newObjectReader(ctx, bucket, m), name: name, want: want}
	if want != nil {
		d.sum = sha256.New()
	}
	return d, nil
}

// downloadReader is an object being read.
type downloadReader struct {
	r    *objectReader
	name string
	want *job.Object
	sum  hash.Hash // with want
	n    int64
}

func (d *downloadReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("client: read %s: %w", d.name, err)
	}
	if d.want == nil {
		return n, err
	}
	d.sum.Write(p[:n])
	d.n += int64(n)
	if err == io.EOF {
		if got := hex.EncodeToString(d.sum.Sum(nil)); d.n != d.want.Bytes || got != d.want.SHA256 {
			return n, fmt.Errorf("client: object %s is %d bytes with sha256 %s; its job's result names %d bytes with sha256 %s",
				d.name, d.n, got, d.want.Bytes, d.want.SHA256)
		}
	}
	return n, err
}

// Close ends the read (no request is in flight between two Reads).
func (d *downloadReader) Close() error { return nil }

// Put uploads r to the tenant's input bucket (job.InBucket) under ref
// (job.CheckRef), replacing an object of that name, and returns its size
// and hex sha256 (computed while streaming: r is never held in memory
// whole). A job names it in a job.File's Ref. A full bucket (the tenant's
// storage quota) is a *BucketFullError (errors.Is ErrBucketFull and
// ErrQuota). A failed Put leaves the bucket as it was: the object it
// replaced, or none. ctx bounds the whole upload; without a deadline each
// chunk's publish takes PublishTimeout at most.
func (c *Client) Put(ctx context.Context, ref string, r io.Reader) (job.Object, error) {
	if err := job.CheckRef(ref); err != nil {
		return job.Object{}, &job.ValidationError{Fields: []job.FieldError{{Field: "ref", Message: err.Error()}}}
	}
	if r == nil {
		return job.Object{}, fmt.Errorf("%w: Put of %s: nil reader", ErrConfig, ref)
	}
	bucket := job.InBucket(c.tenant)
	lctx, cancel := c.withTimeout(ctx)
	_, err := c.objectMeta(lctx, bucket, ref) // a refused permission fails here at once
	cancel()
	if err != nil {
		return job.Object{}, fmt.Errorf("client: upload %s: %w", ref, err)
	}
	obs, err := c.objectStore(ctx, bucket)
	if err != nil {
		return job.Object{}, err
	}
	// objput, not obs.Put: nats.go's Put keeps thousands of chunks in
	// flight, and on a refused chunk leaves a meta naming purged bytes.
	// objput stores the meta last, so a failed upload leaves the object
	// it would have replaced as it was.
	info, sum, err := objput.Put(ctx, c.js, obs, bucket, ref, r)
	switch {
	case err != nil && streamfull.Is(err):
		return job.Object{}, &BucketFullError{Tenant: c.tenant, Bucket: bucket, Name: ref, Err: err}
	case err != nil && timedOut(err):
		if perr := c.deniedAny("$O." + bucket); perr != nil {
			return job.Object{}, perr
		}
		fallthrough
	case err != nil:
		return job.Object{}, fmt.Errorf("client: upload %s: %w", ref, err)
	}
	return job.Object{Name: ref, Bytes: int64(info.Size), SHA256: hex.EncodeToString(sum)}, nil
}
