package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// errSpanFileClosed is returned by the span file exporter after Shutdown.
var errSpanFileClosed = errors.New("telemetry: span file closed")

// SpanRecord is one line of the span file: a finished span.
type SpanRecord struct {
	TraceID      string `json:"trace_id"`
	SpanID       string `json:"span_id"`
	ParentSpanID string `json:"parent_span_id,omitempty"`
	Name         string `json:"name"`
	// Kind is internal, server, client, producer or consumer.
	Kind       string    `json:"kind"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS float64   `json:"duration_ms"`
	// Status is unset, ok or error.
	Status        string `json:"status"`
	StatusMessage string `json:"status_message,omitempty"`
	// Attributes holds the span's attributes. Read back by ReadSpans,
	// numbers are json.Number (integers keep their precision).
	Attributes map[string]any `json:"attributes,omitempty"`
	Events     []EventRecord  `json:"events,omitempty"`
	// Service is the resource's service.name.
	Service string `json:"service"`
}

// EventRecord is a span event (e.g. an exception recorded with RecordError).
type EventRecord struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Duration is End - Start.
func (r SpanRecord) Duration() time.Duration { return r.End.Sub(r.Start) }

// fileExporter appends spans to a JSONL file. The file is opened O_APPEND
// and each line goes out in one write(2), so several processes can share
// it: on a local filesystem the kernel appends each write whole.
type fileExporter struct {
	mu  sync.Mutex
	f   *os.File
	buf bytes.Buffer
	enc *json.Encoder
}

var _ sdktrace.SpanExporter = (*fileExporter)(nil)

func newFileExporter(path string) (*fileExporter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("telemetry: span file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("telemetry: span file: %w", err)
	}
	e := &fileExporter{f: f}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e, nil
}

// ExportSpans appends one line per span. A span that cannot be encoded is
// skipped and reported; a write error stops the batch.
func (e *fileExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return errSpanFileClosed
	}
	var errs []error
	for _, s := range spans {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		e.buf.Reset()
		if err := e.enc.Encode(recordFromSpan(s)); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: encode span %q: %w", s.Name(), err))
			continue
		}
		if _, err := e.f.Write(e.buf.Bytes()); err != nil {
			return errors.Join(append(errs, fmt.Errorf("telemetry: span file: %w", err))...)
		}
	}
	return errors.Join(errs...)
}

// Shutdown closes the file; later exports fail with errSpanFileClosed.
func (e *fileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f == nil {
		return nil
	}
	err := e.f.Close()
	e.f = nil
	return err
}

func recordFromSpan(s sdktrace.ReadOnlySpan) SpanRecord {
	sc := s.SpanContext()
	r := SpanRecord{
		TraceID:       sc.TraceID().String(),
		SpanID:        sc.SpanID().String(),
		Name:          s.Name(),
		Kind:          s.SpanKind().String(),
		Start:         s.StartTime().UTC(),
		End:           s.EndTime().UTC(),
		DurationMS:    float64(s.EndTime().Sub(s.StartTime()).Microseconds()) / 1000,
		Status:        strings.ToLower(s.Status().Code.String()),
		StatusMessage: s.Status().Description,
		Attributes:    attrMap(s.Attributes()),
	}
	if p := s.Parent(); p.SpanID().IsValid() {
		r.ParentSpanID = p.SpanID().String()
	}
	if res := s.Resource(); res != nil {
		if v, ok := res.Set().Value(semconv.ServiceNameKey); ok {
			r.Service = v.AsString()
		}
	}
	for _, ev := range s.Events() {
		r.Events = append(r.Events, EventRecord{Name: ev.Name, Time: ev.Time.UTC(), Attributes: attrMap(ev.Attributes)})
	}
	return r
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = attrValue(kv.Value)
	}
	return m
}

// attrValue converts v for encoding/json, which rejects NaN and ±Inf.
func attrValue(v attribute.Value) any {
	switch v.Type() {
	case attribute.FLOAT64:
		return jsonFloat(v.AsFloat64())
	case attribute.FLOAT64SLICE:
		fs := v.AsFloat64Slice()
		out := make([]any, len(fs))
		for i, f := range fs {
			out[i] = jsonFloat(f)
		}
		return out
	case attribute.SLICE:
		vs := v.AsSlice()
		out := make([]any, len(vs))
		for i, e := range vs {
			out[i] = attrValue(e)
		}
		return out
	case attribute.MAP:
		return attrMap(v.AsMap())
	case attribute.BOOL, attribute.INT64, attribute.STRING, attribute.BOOLSLICE,
		attribute.INT64SLICE, attribute.STRINGSLICE, attribute.BYTESLICE, attribute.EMPTY:
		return v.AsInterface() // []byte encodes as base64
	default:
		return v.String()
	}
}

func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return f
}
