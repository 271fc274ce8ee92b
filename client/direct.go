package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
)

// A tenant reads its streams and buckets with JetStream direct gets only:
// a request answered on the request's own reply subject. It creates no
// consumer, because a consumer's deliver subject is a subject the server
// publishes on for the client, which a tenant's account may not let it
// choose (package tenant, account.go). Each read names the stream
// sequence to start from and the subject to read, so the client keeps its
// own position, as a consumer would on the server.

// directNext reads the first message on subject in stream at or after
// stream sequence seq. found is false when there is none (yet).
func (c *Client) directNext(ctx context.Context, stream, subject string, seq uint64) (msg *nats.Msg, next uint64, found bool, err error) {
	body, err := json.Marshal(struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{seq, subject})
	if err != nil {
		return nil, 0, false, err
	}
	api := "$JS.API.DIRECT.GET." + stream
	reply, err := c.request(ctx, &nats.Msg{Subject: api, Data: body}, api)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, 0, false, &NoStreamError{Stream: stream, Tenant: c.tenant, Err: err}
	case errors.Is(err, ErrPermission):
		return nil, 0, false, err
	case err != nil:
		return nil, 0, false, fmt.Errorf("read %s: %w", stream, err)
	}
	if status := reply.Header.Get("Status"); status != "" && len(reply.Data) == 0 {
		if status == "404" {
			return nil, seq, false, nil
		}
		return nil, 0, false, fmt.Errorf("read %s: JetStream answered %s %s", stream, status, reply.Header.Get("Description"))
	}
	got, err := strconv.ParseUint(reply.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil || got < seq {
		return nil, 0, false, fmt.Errorf("read %s: a direct get answered sequence %q for %d", stream, reply.Header.Get("Nats-Sequence"), seq)
	}
	return reply, got + 1, true, nil
}

// objectReader streams an object's chunks with direct gets, in order, and
// fails at its end unless it read the size and SHA-256 digest its meta
// names (the check nats.go's Object Store makes).
type objectReader struct {
	c       *Client
	ctx     context.Context
	stream  string
	chunks  string // the chunks' subject
	seq     uint64 // where the next chunk is looked for
	left    int    // chunks not read yet
	size    uint64
	digest  string
	n       uint64
	sum     hash.Hash
	pending []byte
}

// newObjectReader reads the object whose meta is m, in bucket.
func (c *Client) newObjectReader(ctx context.Context, bucket string, m *objMeta) *objectReader {
	return &objectReader{c: c, ctx: ctx, stream: "OBJ_" + bucket, chunks: "$O." + bucket + ".C." + m.info.NUID,
		seq: 1, left: int(m.info.Chunks), size: m.info.Size, digest: m.info.Digest, sum: sha256.New()}
}

func (r *objectReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.left == 0 {
			return 0, r.check()
		}
		if err := r.fetch(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// fetch reads the next chunk, each request bounded by PublishTimeout.
func (r *objectReader) fetch() error {
	ctx, cancel := r.c.withTimeout(r.ctx)
	defer cancel()
	msg, next, found, err := r.c.directNext(ctx, r.stream, r.chunks, r.seq)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: %d of its chunks are missing from %s (it expired, or was replaced, while read)", io.ErrUnexpectedEOF, r.left, r.stream)
	}
	r.seq, r.left, r.pending = next, r.left-1, msg.Data
	r.n += uint64(len(msg.Data))
	r.sum.Write(msg.Data)
	return nil
}

// check compares what was read with the object's meta.
func (r *objectReader) check() error {
	got := "SHA-256=" + base64.URLEncoding.EncodeToString(r.sum.Sum(nil))
	if r.n != r.size || got != r.digest {
		return fmt.Errorf("client: object read as %d bytes with digest %s; its meta names %d bytes with %s", r.n, got, r.size, r.digest)
	}
	return io.EOF
}

// liveChunk reads a live output message (the fleet publishes them: a
// malformed number reads as 0).
func liveChunk(h nats.Header, data []byte) Chunk {
	if v := h.Values(job.HeaderOutEnd); len(v) > 0 {
		return Chunk{End: true, Reason: job.Reason(v[0])}
	}
	num := func(key string) int64 {
		n, _ := strconv.ParseInt(h.Get(key), 10, 64)
		return n
	}
	return Chunk{Stream: h.Get(job.HeaderOutStream), Data: data, Seq: int(num(job.HeaderOutSeq)),
		Run: int(num(job.HeaderOutRun)), Skipped: num(job.HeaderOutSkipped)}
}
