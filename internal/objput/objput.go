// Package objput writes JetStream Object Store objects with flow
// control: one chunk at a time, retried on a refused ingest rate, the meta
// only once every chunk is stored. Used by the worker (results) and the
// client SDK (uploads) instead of jetstream.ObjectStore.Put.
package objput

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Chunk is the chunk size of the objects the worker writes (the
// Object Store's own default).
const Chunk = 128 << 10

// Put writes r as object name of bucket, in the Object Store's own
// format (chunks on $O.<bucket>.C.<nuid>, then the meta on
// $O.<bucket>.M.<name> with a subject rollup), readable by any Object Store
// client. Unlike jetstream.ObjectStore.Put, which keeps up to 4000 chunks
// in flight per object and fails the object when the stream refuses its
// ingest rate, it publishes one chunk at a time and retries a chunk the
// server refused for its rate (429): many jobs kept at once slow each
// other down instead of losing their output. A failed Put leaves the
// older object of that name as it was; what an older object held is purged
// once the new one is complete. It returns the object and its sha256.
func Put(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, bucket, name string, r io.Reader) (*jetstream.ObjectInfo, []byte, error) {
	old, err := obs.GetInfo(ctx, name, jetstream.GetObjectInfoShowDeleted())
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil, err
	}
	id := nuid.Next()
	chunks := "$O." + bucket + ".C." + id
	info := &jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: Chunk}},
		Bucket: bucket, NUID: id}
	h := sha256.New()
	buf := make([]byte, Chunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			// The id makes a retried chunk that was stored after all a
			// duplicate the stream drops, so the chunks stay in order.
			hdr := nats.Header{jetstream.MsgIDHeader: {fmt.Sprintf("%s.%d", id, info.Chunks)}}
			if err := publishRetrying(ctx, js, chunks, hdr, buf[:n]); err != nil {
				purgeSubject(js, bucket, chunks)
				return nil, nil, err
			}
			info.Size += uint64(n)
			info.Chunks++
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			purgeSubject(js, bucket, chunks)
			return nil, nil, rerr
		}
	}
	sum := h.Sum(nil)
	info.Digest = "SHA-256=" + base64.URLEncoding.EncodeToString(sum)
	info.ModTime = time.Now().UTC()
	meta, err := json.Marshal(info)
	if err != nil {
		return nil, nil, err
	}
	hdr := nats.Header{}
	hdr.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if err := publishRetrying(ctx, js, "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(name)), hdr, meta); err != nil {
		purgeSubject(js, bucket, chunks)
		return nil, nil, err
	}
	if old != nil && !old.Deleted {
		purgeSubject(js, bucket, "$O."+bucket+".C."+old.NUID)
	}
	return info, sum, nil
}

// publishRetrying publishes one message and waits for its ack, retrying
// (with a growing pause, until ctx ends) while the stream refuses it for
// its ingest rate or the ack does not come in time (the message carries a
// Nats-Msg-Id, so a retry of a stored one is dropped as a duplicate).
func publishRetrying(ctx context.Context, js jetstream.JetStream, subject string, hdr nats.Header, data []byte) error {
	pause := 5 * time.Millisecond
	for {
		m := &nats.Msg{Subject: subject, Header: hdr, Data: data}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.PublishMsg(pctx, m)
		cancel()
		var apiErr *jetstream.APIError
		retry := errors.As(err, &apiErr) && apiErr.Code == 429 ||
			(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse)) && ctx.Err() == nil
		if err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (the stream was refusing its ingest rate)", context.Cause(ctx))
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// purgeSubject removes an object's chunks (a failed or replaced object),
// on a context of its own: it runs when the job's may have ended.
func purgeSubject(js jetstream.JetStream, bucket, subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := js.Stream(ctx, "OBJ_"+bucket); err == nil {
		_ = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
}
