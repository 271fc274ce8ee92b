package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/paddockhq/paddock/client"
)

// GET /v1/jobs/{id}/events: a job's live output and then its result as
// server-sent events (text/event-stream):
//
//	event: output        one per chunk of live output (client.Follow), id "<run>.<seq>",
//	data: {"stream":"stdout","seq":1,"run":1,"data":"hello\n","skipped":0}
//	event: result        the job.Result, once the job has ended; the stream then closes
//	event: error         {"error":{...}} when following failed; the stream then closes
//	: ping               a comment every sseHeartbeat
//
// A reconnecting client sends Last-Event-ID: the output up to that chunk is
// skipped. A chunk's data is text: a UTF-8 character cut between two chunks
// is sent whole with the later one, and bytes that are not UTF-8 arrive as
// U+FFFD (the kept output, GET …/output/{stream}, has the exact bytes).
// Each token holds at most Config.MaxStreams streams at once.

const (
	// sseHeartbeat spaces the comments that keep an idle stream (a job
	// still queued, or printing nothing) open through proxies.
	sseHeartbeat = 15 * time.Second
	// sseWriteTimeout bounds the write of one event: a reader that stops
	// reading for that long is dropped.
	sseWriteTimeout = 10 * time.Second
	// sseResultWait bounds the wait for the result after the live output
	// ended (the result is stored right after the end marker).
	sseResultWait = 30 * time.Second
	// sseBuffer bounds the events read ahead of the writer.
	sseBuffer = 16
)

// sseEvent is one event to write.
type sseEvent struct {
	name string // output, result or error
	id   string // "" for none
	data any    // encoded as JSON on one line
}

// outputEvent is the data of an output event.
type outputEvent struct {
	Stream  string `json:"stream"`
	Seq     int    `json:"seq"`
	Run     int    `json:"run"`
	Data    string `json:"data"`
	Skipped int64  `json:"skipped"`
}

// followJob is GET /v1/jobs/{id}/events.
func (g *Gateway) followJob(w http.ResponseWriter, r *http.Request, id Identity) error {
	jid, err := jobID(r)
	if err != nil {
		return err
	}
	release, ok := g.lim.openStream(limitKey(id), time.Now())
	if !ok {
		return &apiError{Status: http.StatusTooManyRequests, Code: codeTooManyStreams, RetryAfter: sseHeartbeat,
			Message: fmt.Sprintf("token %s holds %d event streams already, its limit: close one first", id.TokenID, g.cfg.MaxStreams)}
	}
	defer release()
	c, err := g.tenantClient(r.Context(), id)
	if err != nil {
		return err
	}
	from := parseEventID(r.Header.Get("Last-Event-ID"))
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: rc, heartbeat: sseHeartbeat, writeTimeout: sseWriteTimeout}
	if err := sw.comment("job " + jid); err != nil {
		return nil // the client is gone
	}
	ctx, cancel := context.WithCancel(r.Context())
	events := make(chan sseEvent, sseBuffer)
	var wg sync.WaitGroup
	wg.Go(func() { followEvents(ctx, c, jid, from, events) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	if err := sw.run(ctx, events); err != nil {
		g.log.Debug("event stream dropped", "job", jid, "tenant", id.Tenant, "err", err)
	}
	return nil
}

// eventID is the position of an output chunk: its run, then its seq.
type eventID struct{ run, seq int }

func (e eventID) String() string { return strconv.Itoa(e.run) + "." + strconv.Itoa(e.seq) }

// after reports whether e comes after o.
func (e eventID) after(o eventID) bool { return e.run > o.run || e.run == o.run && e.seq > o.seq }

// parseEventID reads a Last-Event-ID; the zero eventID (from the start)
// when there is none or it is not one of ours.
func parseEventID(v string) eventID {
	run, seq, ok := strings.Cut(v, ".")
	r, err1 := strconv.Atoi(run)
	s, err2 := strconv.Atoi(seq)
	if !ok || err1 != nil || err2 != nil || r < 0 || s < 0 {
		return eventID{}
	}
	return eventID{run: r, seq: s}
}

// followEvents sends job id's output events after from, then its result
// event (or an error event), then closes out. It stops when ctx ends.
func followEvents(ctx context.Context, c *client.Client, id string, from eventID, out chan<- sseEvent) {
	defer close(out)
	send := func(ev sseEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var text utf8Joiner
	for ch, err := range c.Follow(ctx, id) {
		if errors.Is(err, client.ErrNoLiveOutput) {
			break // finished, and its live output is gone: the result has it
		}
		if err != nil {
			if ctx.Err() == nil {
				send(errorEvent(err))
			}
			return
		}
		if ch.End {
			break
		}
		data := text.join(ch.Stream, ch.Data)
		at := eventID{run: ch.Run, seq: ch.Seq}
		if !at.after(from) {
			continue
		}
		if !send(sseEvent{name: "output", id: at.String(),
			data: outputEvent{Stream: ch.Stream, Seq: ch.Seq, Run: ch.Run, Data: data, Skipped: ch.Skipped}}) {
			return
		}
	}
	for stream, rest := range text.rest() {
		if !send(sseEvent{name: "output", data: outputEvent{Stream: stream, Data: string(rest)}}) {
			return
		}
	}
	wctx, cancel := context.WithTimeout(ctx, sseResultWait)
	defer cancel()
	res, err := c.Wait(wctx, id)
	switch {
	case err == nil:
		send(sseEvent{name: "result", data: res})
	case ctx.Err() == nil:
		send(errorEvent(fmt.Errorf("the live output of job %s ended but its result did not arrive within %s "+
			"(GET /v1/jobs/%s?wait=30s waits longer): %w", id, sseResultWait, id, err)))
	}
}

func errorEvent(err error) sseEvent {
	e := classify(err)
	return sseEvent{name: "error", data: errorBody{Error: errorDetail{Code: e.Code, Message: e.Message, Fields: e.Fields}}}
}

// utf8Joiner keeps, per stream, the start of a UTF-8 character cut at the
// end of a chunk, and puts it in front of the stream's next chunk.
type utf8Joiner struct {
	held map[string][]byte
}

// join returns held+data up to its last whole character, and holds the
// rest (at most utf8.UTFMax-1 bytes of a character begun).
func (j *utf8Joiner) join(stream string, data []byte) string {
	b := data
	if h := j.held[stream]; len(h) > 0 {
		b = append(h, data...)
		delete(j.held, stream)
	}
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	if cut < len(b) {
		if j.held == nil {
			j.held = map[string][]byte{}
		}
		j.held[stream] = append([]byte(nil), b[cut:]...)
	}
	return string(b[:cut])
}

// rest yields what is held per stream: characters the output never
// finished.
func (j *utf8Joiner) rest() map[string][]byte { return j.held }

// sseWriter writes events, with a write deadline for each and a heartbeat
// comment when idle.
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	heartbeat    time.Duration
	writeTimeout time.Duration
}

// run writes events until out is closed (nil) or a write fails.
func (s *sseWriter) run(ctx context.Context, events <-chan sseEvent) error {
	tick := time.NewTicker(s.heartbeat)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			if err := s.event(ev); err != nil {
				return err
			}
			tick.Reset(s.heartbeat)
		case <-tick.C:
			if err := s.comment("ping"); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *sseWriter) event(ev sseEvent) error {
	data, err := json.Marshal(ev.data)
	if err != nil {
		return fmt.Errorf("gateway: encode a %s event: %w", ev.name, err)
	}
	var b strings.Builder
	b.WriteString("event: " + ev.name + "\n")
	if ev.id != "" {
		b.WriteString("id: " + ev.id + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	return s.write(b.String())
}

func (s *sseWriter) comment(text string) error { return s.write(": " + text + "\n\n") }

func (s *sseWriter) write(text string) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write([]byte(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}
