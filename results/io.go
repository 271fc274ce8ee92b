package results

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/internal/objput"
	"github.com/paddockhq/paddock/job"
)

// IOConfig sizes what a worker sends of a job's output. A zero field takes
// its default.
type IOConfig struct {
	// LiveRate bounds the live output of one job, bytes per second (both
	// streams); what is printed faster is dropped, and the next chunk says
	// how much (job.HeaderOutSkipped). Default 1 MiB/s, with a burst of
	// LiveBuffer.
	LiveRate int64
	// LiveBuffer bounds the bytes of one job's live output waiting to be
	// published (per stream): while the publisher is behind, chunks
	// coalesce up to it, then new bytes are dropped. Default 128 KiB.
	LiveBuffer int
	// MaxKeptBytes bounds the kept output of one stream of one job; past it
	// the object is cut (Object.Truncated). Default 2 GiB.
	MaxKeptBytes int64
	Logger       *slog.Logger
}

// Defaults of IOConfig.
const (
	DefaultLiveRate     = 1 << 20
	DefaultLiveBuffer   = 128 << 10
	DefaultMaxKeptBytes = 2 << 30
	// liveChunk bounds one published chunk.
	liveChunk = 64 << 10
	// livePending bounds the unacknowledged chunks of one job: 2 × 64 KiB
	// in flight keep the default 1 MiB/s going over a round trip of up
	// to 125 ms, and the bytes held until the server acks stay small.
	livePending = 2
)

// liveChunks holds the buffers of buffered live output, each of liveChunk
// bytes: Write fills one, the publisher hands it to NATS and takes it
// back once the server acknowledged it (the future holds the message
// until then). A flood then costs no allocation per chunk, and one job's
// live output holds at most LiveBuffer/liveChunk + 1 chunks per stream
// plus livePending in flight.
var liveChunks = sync.Pool{New: func() any { b := make([]byte, liveChunk); return &b }}

func getChunk() []byte { return (*liveChunks.Get().(*[]byte))[:0] }

// putChunk gives a buffer of getChunk back; the caller holds no part of it.
func putChunk(b []byte) {
	if cap(b) == liveChunk {
		b = b[:0]
		liveChunks.Put(&b)
	}
}

// IO is the worker's side of agent I/O on NATS: live output, kept output,
// artifacts and input files, all in the job's tenant's own stream and
// buckets.
type IO struct {
	js  jetstream.JetStream
	cfg IOConfig
	log *slog.Logger

	mu      sync.Mutex
	buckets map[string]jetstream.ObjectStore
}

// NewIO returns the agent I/O of a worker connected with js.
func NewIO(js jetstream.JetStream, cfg IOConfig) (*IO, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: NewIO needs a JetStream", ErrConfig)
	}
	if cfg.LiveRate < 0 || cfg.LiveBuffer < 0 || cfg.MaxKeptBytes < 0 {
		return nil, fmt.Errorf("%w: negative LiveRate, LiveBuffer or MaxKeptBytes", ErrConfig)
	}
	cfg.LiveRate = cmp.Or(cfg.LiveRate, DefaultLiveRate)
	cfg.LiveBuffer = cmp.Or(cfg.LiveBuffer, DefaultLiveBuffer)
	cfg.MaxKeptBytes = cmp.Or(cfg.MaxKeptBytes, DefaultMaxKeptBytes)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &IO{js: js, cfg: cfg, log: cfg.Logger.With("component", "results.io"), buckets: map[string]jetstream.ObjectStore{}}, nil
}

// bucket opens (once) the Object Store bucket name.
func (x *IO) bucket(ctx context.Context, name string) (jetstream.ObjectStore, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if b, ok := x.buckets[name]; ok {
		return b, nil
	}
	b, err := x.js.ObjectStore(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("results: bucket %s: %w (the scheduler creates each tenant's buckets)", name, err)
	}
	x.buckets[name] = b
	return b, nil
}

// Input opens the object ref of tenant's input bucket (a job's File.Ref)
// and returns it with its size. ErrNotFound when there is no such object.
func (x *IO) Input(ctx context.Context, tenant, ref string) (io.ReadCloser, int64, error) {
	b, err := x.bucket(ctx, job.InBucket(tenant))
	if err != nil {
		return nil, 0, err
	}
	r, err := b.Get(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, 0, fmt.Errorf("%w: %q is not in %s (upload it with `paddock put`; objects expire after the retention)", ErrNotFound, ref, job.InBucket(tenant))
	}
	if err != nil {
		return nil, 0, fmt.Errorf("results: open input %q: %w", ref, err)
	}
	info, err := r.Info()
	if err != nil {
		r.Close()
		return nil, 0, fmt.Errorf("results: input %q: %w", ref, err)
	}
	return r, int64(info.Size), nil
}

// Put stores r as object name of tenant's output bucket, and returns it
// named with its size and sha256. A full bucket (the tenant's quota) is an
// error matching ErrStreamFull.
func (x *IO) Put(ctx context.Context, tenant, name string, r io.Reader) (job.Object, error) {
	b, err := x.bucket(ctx, job.OutBucket(tenant))
	if err != nil {
		return job.Object{Name: name}, err
	}
	info, sum, err := objput.Put(ctx, x.js, b, job.OutBucket(tenant), name, r)
	if err != nil {
		if IsStreamFull(err) {
			err = fmt.Errorf("%w: %s is full (the tenant's stored-bytes quota): %v", ErrStreamFull, job.OutBucket(tenant), err)
		}
		return job.Object{Name: name}, err
	}
	return job.Object{Name: name, Bytes: int64(info.Size), SHA256: hex.EncodeToString(sum)}, nil
}

// Delete removes object name of tenant's output bucket (a dropped artifact).
func (x *IO) Delete(ctx context.Context, tenant, name string) error {
	b, err := x.bucket(ctx, job.OutBucket(tenant))
	if err != nil {
		return err
	}
	if err := b.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}

// Keeper streams one stream of a job's output into the output bucket. Its
// Write blocks while the store is behind (the command then waits on its
// writes: the full output is exact or cut with a note, never silently
// lost); past the per-job cap, or once the store failed, bytes are counted
// and dropped. The store's writer (and its chunk buffer) starts with the
// first byte, or at Close for an empty stream: a job's quiet stderr holds
// no buffer while its stdout floods. Write and Close are called from one
// goroutine.
type Keeper struct {
	x       *IO
	ctx     context.Context
	tenant  string
	name    string
	pw      *io.PipeWriter
	pr      *io.PipeReader
	started bool
	done    chan struct{}
	obj     job.Object
	err     error
	written int64
	printed int64
}

// Keep starts keeping object name for tenant.
func (x *IO) Keep(ctx context.Context, tenant, name string) *Keeper {
	pr, pw := io.Pipe()
	return &Keeper{x: x, ctx: ctx, tenant: tenant, name: name, pr: pr, pw: pw, done: make(chan struct{})}
}

// start runs the store's writer, once.
func (k *Keeper) start() {
	if k.started {
		return
	}
	k.started = true
	go func() {
		defer close(k.done)
		k.obj, k.err = k.x.Put(k.ctx, k.tenant, k.name, k.pr)
		k.pr.CloseWithError(errKeeperDone)
	}()
}

var errKeeperDone = errors.New("results: keeper ended")

// Write keeps p, or what of it fits the cap.
func (k *Keeper) Write(p []byte) (int, error) {
	k.printed += int64(len(p))
	room := k.x.cfg.MaxKeptBytes - k.written
	if room <= 0 || len(p) == 0 {
		return len(p), nil
	}
	k.start()
	n, _ := k.pw.Write(p[:min(int64(len(p)), room)]) // a failed store is reported by Close
	k.written += int64(n)
	return len(p), nil
}

// Close ends the object and returns it named; an Object with an empty
// Name was not kept, and its Note says why.
func (k *Keeper) Close() job.Object {
	k.start()
	k.pw.Close()
	<-k.done
	if k.err != nil {
		why := "the output store failed"
		if errors.Is(k.err, ErrStreamFull) {
			why = "the tenant's output bucket is full (stored-bytes quota)"
		}
		k.x.log.Warn("output not kept", "object", k.name, "err", k.err)
		return job.Object{Bytes: k.printed, Note: fmt.Sprintf("not kept: %s: %v", why, k.err)}
	}
	o := k.obj
	if k.printed > k.written {
		o.Truncated = true
		o.Note = fmt.Sprintf("cut at the per-job cap of %d bytes; the command printed %d", k.x.cfg.MaxKeptBytes, k.printed)
	}
	return o
}

// Live publishes one run of a job's live output. Write never blocks: it
// adds to a bounded buffer that a publisher goroutine drains at the job's
// rate, and counts what it has to drop.
type Live struct {
	x       *IO
	subject string
	run     string
	lim     *rate.Limiter

	mu   sync.Mutex
	wake chan struct{}
	// Per stream: the buffered bytes in segments, each with the count of
	// bytes dropped just before it; skipped counts those dropped after the
	// last segment; size is the buffered total.
	segs    [2][]segment
	skipped [2]int64
	size    [2]int
	closed  bool
	reason  string
	done    chan struct{}
	seq     int
}

// Live starts the live output of run of tenant's job id.
func (x *IO) Live(tenant, id string, run int) *Live {
	l := &Live{
		x: x, subject: job.OutputSubject(tenant, id), run: strconv.Itoa(run),
		lim:  rate.NewLimiter(rate.Limit(x.cfg.LiveRate), max(x.cfg.LiveBuffer, liveChunk)),
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	go l.publish()
	return l
}

// segment is buffered live output and the bytes dropped just before it.
type segment struct {
	skipped int64
	data    []byte
}

// Write adds p to stream (0 stdout, 1 stderr); what does not fit the
// buffer is dropped and counted.
func (l *Live) Write(stream int, p []byte) {
	l.mu.Lock()
	n := min(max(l.x.cfg.LiveBuffer-l.size[stream], 0), len(p))
	for rest := p[:n]; len(rest) > 0; {
		segs := l.segs[stream]
		k := len(segs)
		if k == 0 || l.skipped[stream] > 0 || len(segs[k-1].data) == cap(segs[k-1].data) {
			segs = append(segs, segment{skipped: l.skipped[stream], data: getChunk()})
			l.skipped[stream] = 0
			k++
		}
		last := &segs[k-1]
		m := copy(last.data[len(last.data):cap(last.data)], rest)
		last.data = last.data[:len(last.data)+m]
		rest = rest[m:]
		l.segs[stream] = segs
	}
	l.size[stream] += n
	l.skipped[stream] += int64(len(p) - n)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close publishes what is buffered, then the end marker with reason (none
// when reason is ""), and waits (at most a few seconds) for the server to
// store them.
func (l *Live) Close(reason job.Reason) {
	l.mu.Lock()
	l.closed, l.reason = true, string(reason)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	select {
	case <-l.done:
	case <-time.After(5 * time.Second):
		l.x.log.Warn("live output end not confirmed", "subject", l.subject)
	}
}

// publish drains the buffers in order, keeping at most livePending chunks
// unacknowledged, at the job's rate: while it waits for the rate, chunks
// coalesce in the buffer, and once the buffer is full Write drops bytes.
func (l *Live) publish() {
	defer close(l.done)
	var pending []inflight
	for {
		<-l.wake
		for {
			stream, seg, closing, ok := l.take()
			if !ok {
				if closing {
					if l.reason != "" { // "": the run ends without one (the job runs again)
						l.send(&pending, nats.Header{job.HeaderOutEnd: {l.reason}}, nil, 0, -1)
					}
					l.settle(pending, 0)
					return
				}
				break
			}
			l.pace(len(seg.data), closing)
			l.send(&pending, nil, seg.data, seg.skipped, stream)
			pending = l.settle(pending, livePending)
		}
	}
}

// take removes the first segment of the first stream that has one; once
// Close was called (closing), a count of bytes dropped at the end of a
// stream is taken as a segment without data. ok is false when nothing is
// left.
func (l *Live) take() (stream int, seg segment, closing, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	closing = l.closed
	for i := range l.segs {
		if len(l.segs[i]) > 0 {
			seg = l.segs[i][0]
			l.segs[i][0] = segment{}
			l.segs[i] = l.segs[i][1:]
			l.size[i] -= len(seg.data)
			return i, seg, closing, true
		}
		if closing && l.skipped[i] > 0 {
			seg.skipped, l.skipped[i] = l.skipped[i], 0
			return i, seg, closing, true
		}
	}
	return 0, seg, closing, false
}

// pace waits until the job's rate allows n more bytes; after Close it
// waits at most 2 s in all, so that the end is never held up for long.
func (l *Live) pace(n int, closing bool) {
	r := l.lim.ReserveN(time.Now(), min(n, l.lim.Burst()))
	d := r.Delay()
	if closing {
		d = min(d, 100*time.Millisecond)
	}
	time.Sleep(d)
}

// send publishes one message (stream < 0: the end marker).
func (l *Live) send(pending *[]inflight, h nats.Header, data []byte, skipped int64, stream int) {
	if stream >= 0 && len(data) == 0 && skipped == 0 {
		putChunk(data)
		return
	}
	l.seq++
	m := nats.NewMsg(l.subject)
	if h != nil {
		m.Header = h
	}
	m.Header.Set(job.HeaderOutSeq, strconv.Itoa(l.seq))
	m.Header.Set(job.HeaderOutRun, l.run)
	if stream >= 0 {
		m.Header.Set(job.HeaderOutStream, [2]string{"stdout", "stderr"}[stream])
	}
	if skipped > 0 {
		m.Header.Set(job.HeaderOutSkipped, strconv.FormatInt(skipped, 10))
	}
	m.Data = data
	f, err := l.x.js.PublishMsgAsync(m)
	if err != nil {
		// The buffer is not given back: whether the client still holds
		// the message is its business.
		l.x.log.Debug("live output chunk not published", "subject", l.subject, "err", err)
		return
	}
	*pending = append(*pending, inflight{f, data})
}

// inflight is a published chunk and its buffer, held until the server
// acknowledged it.
type inflight struct {
	f   jetstream.PubAckFuture
	buf []byte
}

// settle waits until at most keep chunks are unacknowledged; the buffer
// of an answered one goes back to liveChunks (one not answered in 5 s is
// left to the garbage collector: the client may still send it).
func (l *Live) settle(pending []inflight, keep int) []inflight {
	for len(pending) > keep {
		p := pending[0]
		select {
		case <-p.f.Ok():
			putChunk(p.buf)
		case err := <-p.f.Err():
			l.x.log.Debug("live output chunk not stored", "subject", l.subject, "err", err)
			putChunk(p.buf)
		case <-time.After(5 * time.Second):
		}
		pending[0] = inflight{}
		pending = pending[1:]
	}
	return pending
}
