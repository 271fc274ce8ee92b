package telemetry

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tail of a span file written by Setup's exporter holds a job's whole
// trace, as ReadSpans finds it in the whole file.
func TestSpanTailOfExportedFile(t *testing.T) {
	path, traceID := writeJobTraces(t)
	tail, err := NewSpanTail(path, SpanTailConfig{})
	require.NoError(t, err)
	spans, err := tail.Job(context.Background(), "j-1")
	require.NoError(t, err)
	require.Len(t, spans, 5, "the whole trace, spans without the job id included")
	for _, s := range spans {
		assert.Equal(t, traceID, s.TraceID)
	}
	all, err := ReadSpans(path, "j-1")
	require.NoError(t, err)
	assert.Equal(t, all, spans)
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n atomic.Int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

func spanLine(trace, span, parent, name, jobID, tenant string, at time.Time) string {
	return fmt.Sprintf(`{"trace_id":%q,"span_id":%q,"parent_span_id":%q,"name":%q,"kind":"internal","start":%q,"end":%q,`+
		`"duration_ms":1000,"status":"ok","attributes":{"paddock.job.id":%q,"paddock.tenant":%q},"service":"paddock"}`+"\n",
		trace, span, parent, name, at.Format(time.RFC3339Nano), at.Add(time.Second).Format(time.RFC3339Nano), jobID, tenant)
}

func TestSpanTailJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	ctx := context.Background()
	tail, err := NewSpanTail(path, SpanTailConfig{})
	require.NoError(t, err)
	spans, err := tail.Job(ctx, "j1")
	require.NoError(t, err, "no span file yet: no spans")
	assert.Empty(t, spans)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	text := spanLine("aa", "s1", "p0", "paddock.submit", "j1", "dev", at) +
		spanLine("bb", "x1", "", "paddock.submit", "j2", "dev", at) +
		// a span of j1's trace without the job's id: still j1's
		strings.Replace(spanLine("aa", "s2", "s1", "paddock.sandbox", "", "dev", at.Add(time.Second)), `"paddock.job.id":"",`, "", 1) +
		`{"trace_id":"aa","torn` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	spans, err = tail.Job(ctx, "j1")
	require.NoError(t, err)
	require.Len(t, spans, 2)
	assert.Equal(t, "aa", spans[0].TraceID)
	assert.Equal(t, "p0", spans[0].ParentSpanID)
	assert.Equal(t, "paddock.submit", spans[0].Name)
	assert.Equal(t, "dev", spans[0].Attributes["paddock.tenant"])
	assert.Equal(t, time.Second, spans[0].Duration())
	assert.Equal(t, "paddock.sandbox", spans[1].Name)

	_, err = NewSpanTail(path, SpanTailConfig{MaxBytes: -1})
	assert.Error(t, err)
}

// A read waits for a free slot, or for its context.
func TestSpanTailConcurrency(t *testing.T) {
	tail, err := NewSpanTail(filepath.Join(t.TempDir(), "spans.jsonl"), SpanTailConfig{Concurrency: 1})
	require.NoError(t, err)
	tail.sem <- struct{}{} // a read in progress
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = tail.Job(ctx, "j1")
	require.ErrorIs(t, err, context.Canceled)
	<-tail.sem
	_, err = tail.Job(context.Background(), "j1")
	assert.NoError(t, err)
}

// A trace request on a span file far larger than its bound reads the
// file's last MaxBytes, once, and still finds a recent job's trace; an old
// job's spans, past the bound, are not read at all.
func TestAttackTraceOnLargeSpanFile(t *testing.T) {
	const limit = 8 << 20
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	f, err := os.Create(path)
	require.NoError(t, err)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := bufio.NewWriterSize(f, 1<<20)
	_, err = w.WriteString(spanLine("old", "o1", "", "paddock.submit", "old-job", "dev", at))
	require.NoError(t, err)
	filler := 0
	for size := int64(0); size < 4*limit; filler++ {
		n, err := w.WriteString(spanLine(fmt.Sprintf("t%031d", filler), "f1", "", "paddock.attempt", fmt.Sprintf("other-%d", filler), "other", at))
		require.NoError(t, err)
		size += int64(n)
	}
	_, err = w.WriteString(spanLine("new", "n1", "", "paddock.submit", "new-job", "dev", at) + spanLine("new", "n2", "n1", "paddock.attempt", "new-job", "dev", at))
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	st, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	t.Logf("span file: %d MiB, %d spans", st.Size()>>20, filler+3)

	rf, err := os.Open(path)
	require.NoError(t, err)
	defer rf.Close()
	c := &countingReaderAt{r: rf}
	spans, err := readSpanTail(c, st.Size(), "new-job", limit)
	require.NoError(t, err)
	require.Len(t, spans, 2)
	assert.Equal(t, "n1", spans[0].SpanID)
	assert.LessOrEqual(t, c.n.Load(), int64(limit), "one bounded read")

	c.n.Store(0)
	spans, err = readSpanTail(c, st.Size(), "old-job", limit)
	require.NoError(t, err)
	assert.Empty(t, spans, "spans older than the bound are not found")
	assert.LessOrEqual(t, c.n.Load(), int64(limit))

	tail, err := NewSpanTail(path, SpanTailConfig{})
	require.NoError(t, err)
	spans, err = tail.Job(context.Background(), "new-job")
	require.NoError(t, err)
	assert.Len(t, spans, 2, "the default bound (8 MiB) finds the recent job")
}
