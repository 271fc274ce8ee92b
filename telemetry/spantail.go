package telemetry

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
)

// SpanTailConfig configures a SpanTail. A zero field takes its default.
type SpanTailConfig struct {
	// MaxBytes bounds what one read takes of the span file: its last
	// MaxBytes, read once (default 8 MiB, some thousands of jobs). A job
	// whose spans were all written before them shows no trace.
	MaxBytes int64
	// Concurrency bounds the reads at once, each holding up to MaxBytes
	// (default 2).
	Concurrency int
}

// SpanTail reads the traces of one job from the tail of a span file
// written through Config.SpanFile, in bounded memory and time: the
// dashboard's trace view (a request per job, on a file that only grows).
// ReadSpans, which reads the whole file, is for the CLI.
type SpanTail struct {
	path string
	max  int64
	sem  chan struct{} // one slot per read in progress
}

// NewSpanTail returns a SpanTail of the span file at path (which need not
// exist yet).
func NewSpanTail(path string, cfg SpanTailConfig) (*SpanTail, error) {
	if cfg.MaxBytes < 0 || cfg.Concurrency < 0 {
		return nil, fmt.Errorf("telemetry: span tail: negative MaxBytes (%d) or Concurrency (%d)", cfg.MaxBytes, cfg.Concurrency)
	}
	return &SpanTail{path: path, max: cmp.Or(cfg.MaxBytes, 8<<20), sem: make(chan struct{}, cmp.Or(cfg.Concurrency, 2))}, nil
}

// Job returns the spans of job id's traces in the file's tail, ordered by
// start time: a trace is the job's when one of its spans has the job's id
// (AttrJobID); then all its spans are returned, including those without
// the id. No file yet: no spans. Lines that do not parse (torn by a
// crash, or cut by the bound) are skipped.
func (t *SpanTail) Job(ctx context.Context, id string) ([]SpanRecord, error) {
	select {
	case t.sem <- struct{}{}:
		defer func() { <-t.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: read spans: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("telemetry: read spans: %w", err)
	}
	return readSpanTail(f, st.Size(), id, t.max)
}

// readSpanTail reads the last limit bytes of a span file of size once and
// returns the spans of the traces of job id in them (SpanTail.Job).
func readSpanTail(r io.ReaderAt, size int64, id string, limit int64) ([]SpanRecord, error) {
	off := max(0, size-limit)
	buf := make([]byte, size-off)
	n, err := r.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("telemetry: read spans: %w", err)
	}
	buf = buf[:n]
	if off > 0 { // the first line is cut: skip it
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:]
		} else {
			buf = nil
		}
	}
	traces := map[string]bool{}
	quoted := append(append([]byte(`"`), jsonString(id)...), '"')
	forLines(buf, func(line []byte) {
		if !bytes.Contains(line, quoted) {
			return
		}
		if rec, ok := decodeSpan(line); ok && rec.Attributes[string(AttrJobID)] == id {
			traces[rec.TraceID] = true
		}
	})
	var out []SpanRecord
	if len(traces) == 0 {
		return out, nil
	}
	key := []byte(`"trace_id":"`)
	forLines(buf, func(line []byte) {
		i := bytes.Index(line, key)
		if i < 0 {
			return
		}
		rest := line[i+len(key):]
		if j := bytes.IndexByte(rest, '"'); j < 0 || !traces[string(rest[:j])] {
			return
		}
		if r, ok := decodeSpan(line); ok && traces[r.TraceID] {
			out = append(out, r)
		}
	})
	slices.SortStableFunc(out, func(a, b SpanRecord) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// forLines calls fn with each line of buf.
func forLines(buf []byte, fn func([]byte)) {
	for len(buf) > 0 {
		line := buf
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[:i], buf[i+1:]
		} else {
			buf = nil
		}
		fn(line)
	}
}

// decodeSpan decodes one line of the span file, numbers as json.Number (a
// torn line, or one without a trace id, is not ok).
func decodeSpan(line []byte) (SpanRecord, bool) {
	var r SpanRecord
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	return r, dec.Decode(&r) == nil && r.TraceID != ""
}
