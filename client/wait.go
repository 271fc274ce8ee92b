package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// waitChunk is the number of ids one ordered consumer of WaitAll filters on.
// 1000 subjects of up to 144 bytes stay well inside a 1 MB request.
const waitChunk = 1000

// Get returns the terminal result of job id, or an error wrapping
// ErrNotFinished when there is none (yet). It reads the last message on
// job.ResultSubject(id) with a direct get (any stream replica answers).
func (c *Client) Get(ctx context.Context, id string) (job.Result, error) {
	if err := job.CheckID(id); err != nil {
		return job.Result{}, err
	}
	st, err := c.resultsStream(ctx)
	if err != nil {
		return job.Result{}, err
	}
	msg, err := st.GetLastMsgForSubject(ctx, job.ResultSubject(id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return job.Result{}, fmt.Errorf("%w: %s", ErrNotFinished, id)
	case errors.Is(err, nats.ErrNoResponders):
		c.forgetResultsStream()
		return job.Result{}, &NoStreamError{Stream: job.StreamResults, Err: err}
	case err != nil:
		return job.Result{}, fmt.Errorf("client: get %s: %w", id, err)
	}
	return decodeResult(id, msg.Data)
}

// resultsStream returns the cached handle of job.StreamResults, looking it
// up once (it tells whether direct gets are allowed).
func (c *Client) resultsStream(ctx context.Context) (jetstream.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.results != nil {
		return c.results, nil
	}
	st, err := c.js.Stream(ctx, job.StreamResults)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &NoStreamError{Stream: job.StreamResults, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("client: stream %s: %w", job.StreamResults, err)
	}
	c.results = st
	return st, nil
}

func (c *Client) forgetResultsStream() {
	c.mu.Lock()
	c.results = nil
	c.mu.Unlock()
}

// Wait blocks until job id has a terminal result and returns it, whether the
// job ended before or after the call. It returns ctx's error (wrapped) when
// ctx ends first.
func (c *Client) Wait(ctx context.Context, id string) (job.Result, error) {
	rs, err := c.WaitAll(ctx, []string{id}, nil)
	if err != nil {
		return job.Result{}, err
	}
	return rs[0], nil
}

// WaitAll waits for the terminal results of ids and returns them in the
// order of ids (an id may repeat). progress, if not nil, is called each
// time results arrive, with the number of ids done; the calls come from the
// caller's goroutine. On error (ctx ended, a stream missing) the slice holds
// the results received so far and a zero Result for the others.
//
// One ordered consumer per 1000 ids delivers the last result of each id
// already stored and then every new one (DeliverLastPerSubject on the ids'
// subjects), so there is no window between "look" and "subscribe", no
// polling, and a NATS reconnect resumes where it left off.
func (c *Client) WaitAll(ctx context.Context, ids []string, progress func(done, total int)) ([]job.Result, error) {
	out := make([]job.Result, len(ids))
	pending := make(map[string][]int, len(ids))
	var subjects []string
	for i, id := range ids {
		if err := job.CheckID(id); err != nil {
			return out, err
		}
		if _, ok := pending[id]; !ok {
			subjects = append(subjects, job.ResultSubject(id))
		}
		pending[id] = append(pending[id], i)
	}
	if len(ids) == 0 {
		return out, nil
	}

	msgs := make(chan jetstream.Msg, 64)
	stop := make(chan struct{})
	var watches []watch
	defer func() {
		close(stop)
		c.unwatch(watches)
	}()
	for chunk := range slices.Chunk(subjects, c.waitChunk) {
		w, err := c.watch(ctx, chunk, func(m jetstream.Msg) {
			select {
			case msgs <- m:
			case <-stop:
			}
		})
		if err != nil {
			return out, err
		}
		watches = append(watches, w)
	}

	done := 0
	for done < len(ids) {
		select {
		case m := <-msgs:
			// Subjects escape some ids ("a." is paddock.results.a~): map
			// back with the inverse of job.ResultSubject.
			id, ok := job.IDFromResultSubject(m.Subject())
			if !ok {
				continue // not a result subject (cannot happen with our filters)
			}
			at, ok := pending[id]
			if !ok {
				continue // a republished copy of a result already taken
			}
			r, err := decodeResult(id, m.Data())
			if err != nil {
				return out, err
			}
			for _, i := range at {
				out[i] = r
			}
			delete(pending, id)
			done += len(at)
			if progress != nil {
				progress(done, len(ids))
			}
		case <-ctx.Done():
			return out, fmt.Errorf("client: waiting for %d of %d jobs: %w", len(ids)-done, len(ids), ctx.Err())
		}
	}
	return out, nil
}

// watch is one ordered consumer of WaitAll.
type watch struct {
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
}

func (c *Client) watch(ctx context.Context, subjects []string, handle func(jetstream.Msg)) (watch, error) {
	cons, err := c.js.OrderedConsumer(ctx, job.StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: subjects,
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		// The server drops the consumer by itself if this client vanishes.
		InactiveThreshold: time.Minute,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return watch{}, &NoStreamError{Stream: job.StreamResults, Err: err}
	}
	if err != nil {
		return watch{}, fmt.Errorf("client: watch results: %w", err)
	}
	cc, err := cons.Consume(handle, jetstream.PullHeartbeat(time.Second), jetstream.PullExpiry(5*time.Second))
	if err != nil {
		c.deleteConsumer(cons)
		return watch{}, fmt.Errorf("client: watch results: %w", err)
	}
	return watch{cons: cons, cc: cc}, nil
}

// unwatch stops the consumers and deletes them on the server (best effort:
// InactiveThreshold removes what a failed delete leaves).
func (c *Client) unwatch(ws []watch) {
	for _, w := range ws {
		w.cc.Stop()
		c.deleteConsumer(w.cons)
	}
}

func (c *Client) deleteConsumer(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.js.DeleteConsumer(ctx, job.StreamResults, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		c.log.Debug("ordered consumer not deleted; the server expires it", "consumer", info.Name, "err", err)
	}
}

func decodeResult(id string, data []byte) (job.Result, error) {
	var r job.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return job.Result{}, fmt.Errorf("client: result of %s is not valid JSON: %w", id, err)
	}
	return r, nil
}
