package telemetry

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// envSpanWriter makes the test binary a span-writing child process.
const envSpanWriter = "PADDOCK_TELEMETRY_TEST_SPAN_WRITER"

const (
	writerSpans   = 100
	writerPadding = 8 << 10 // lines well above PIPE_BUF (4 KiB)
)

// runSpanWriter is the child's whole life: append writerSpans large spans to
// path through Setup's span file and exit.
func runSpanWriter(path string) int {
	ctx := context.Background()
	p, err := Setup(ctx, Config{ServiceName: fmt.Sprintf("writer-%d", os.Getpid()), SpanFile: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tracer := p.TracerProvider().Tracer("writer")
	pad := strings.Repeat("x", writerPadding)
	for i := range writerSpans {
		_, span := tracer.Start(ctx, "span", trace.WithAttributes(attribute.Int("i", i), attribute.String("pad", pad)))
		span.End()
	}
	if err := p.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestSpanFileSeveralProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	const procs = 4
	var wg sync.WaitGroup
	errs := make([]error, procs)
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = []string{envSpanWriter + "=" + path} // and no OTEL_* from this environment
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "OTEL_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("writer %d: %w: %s", i, err, out)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		var r SpanRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "line %d is whole", lines+1)
		lines++
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, procs*writerSpans, lines)

	spans, err := ReadSpans(path, "")
	require.NoError(t, err)
	assert.Len(t, spans, procs*writerSpans)
}

func TestSpanFileRecord(t *testing.T) {
	clearOTelEnv(t)
	path := filepath.Join(t.TempDir(), "nested", "spans.jsonl")
	ctx := context.Background()
	p, err := Setup(ctx, Config{ServiceName: "svc", SpanFile: path})
	require.NoError(t, err)
	tracer := p.TracerProvider().Tracer("test")

	ctx, parent := tracer.Start(ctx, "parent", trace.WithAttributes(AttrJobID.String("j-1")))
	start := time.Now()
	_, child := tracer.Start(ctx, "child", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		AttrExitCode.Int(127),
		attribute.Float64("nan", math.NaN()),
		attribute.StringSlice("argv", []string{"sh", "-c"}),
		attribute.Bool("ok", false),
	))
	child.RecordError(fmt.Errorf("boom"))
	child.SetStatus(codes.Error, "command not found")
	child.End(trace.WithTimestamp(start.Add(2500 * time.Microsecond)))
	parent.End()
	require.NoError(t, p.Shutdown(ctx))

	spans, err := ReadSpans(path, "j-1")
	require.NoError(t, err)
	require.Len(t, spans, 2)
	par, ch := spans[0], spans[1]
	assert.Equal(t, "parent", par.Name)
	assert.Empty(t, par.ParentSpanID)
	assert.Equal(t, "internal", par.Kind)
	assert.Equal(t, "unset", par.Status)
	assert.Equal(t, "svc", par.Service)
	assert.Equal(t, "j-1", par.Attributes[string(AttrJobID)])

	assert.Equal(t, "child", ch.Name)
	assert.Equal(t, par.TraceID, ch.TraceID)
	assert.Equal(t, par.SpanID, ch.ParentSpanID)
	assert.Equal(t, "client", ch.Kind)
	assert.Equal(t, "error", ch.Status)
	assert.Equal(t, "command not found", ch.StatusMessage)
	assert.Equal(t, json.Number("127"), ch.Attributes[string(AttrExitCode)])
	assert.Equal(t, "NaN", ch.Attributes["nan"])
	assert.Equal(t, []any{"sh", "-c"}, ch.Attributes["argv"])
	assert.Equal(t, false, ch.Attributes["ok"])
	assert.Equal(t, 2.5, ch.DurationMS)
	assert.InDelta(t, float64(ch.Duration().Microseconds())/1000, ch.DurationMS, 0.001)
	require.Len(t, ch.Events, 1)
	assert.Equal(t, "exception", ch.Events[0].Name)
	assert.Equal(t, "boom", ch.Events[0].Attributes["exception.message"])

	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

func TestSpanFileExportAfterShutdown(t *testing.T) {
	t.Parallel()
	e, err := newFileExporter(filepath.Join(t.TempDir(), "spans.jsonl"))
	require.NoError(t, err)
	require.NoError(t, e.Shutdown(context.Background()))
	require.NoError(t, e.Shutdown(context.Background()))
	assert.ErrorIs(t, e.ExportSpans(context.Background(), nil), errSpanFileClosed)
}

func TestSpanFileUnwritable(t *testing.T) {
	clearOTelEnv(t)
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	_, err := Setup(context.Background(), Config{SpanFile: filepath.Join(blocker, "spans.jsonl")})
	assert.ErrorContains(t, err, "telemetry: span file")
}
