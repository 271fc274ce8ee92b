package telemetry

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// ReadSpans reads a span file written through Config.SpanFile and returns
// the spans of every trace that filter names, ordered by start time. filter
// is a trace id (32 hex digits) or a job id: a trace matches when its id is
// filter or when any of its spans has AttrJobID = filter, and then all its
// spans are returned, including those that carry no job id. An empty filter
// returns every span. Lines that do not parse (a line torn by a crash) are
// skipped.
//
// The file is read twice, keeping only matching spans in memory, so a large
// shared file costs time but not memory.
func ReadSpans(path string, filter string) ([]SpanRecord, error) {
	traces := map[string]bool{}
	if filter != "" {
		// Cheap byte test before decoding: the filter as the encoder wrote it
		// (job ids) or in lower case (trace ids are written lower case).
		encoded := jsonString(filter)
		lower := []byte(strings.ToLower(filter))
		match := func(line []byte) bool { return bytes.Contains(line, encoded) || bytes.Contains(line, lower) }
		err := scanSpans(path, match, func(r *SpanRecord) {
			if strings.EqualFold(r.TraceID, filter) {
				traces[r.TraceID] = true
			} else if id, ok := r.Attributes[string(AttrJobID)].(string); ok && id == filter {
				traces[r.TraceID] = true
			}
		})
		if err != nil {
			return nil, err
		}
		if len(traces) == 0 {
			return nil, nil
		}
	}
	var keys [][]byte
	for id := range traces {
		keys = append(keys, []byte(`"trace_id":"`+id+`"`))
	}
	match := func(line []byte) bool {
		if filter == "" {
			return true
		}
		return slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Contains(line, k) })
	}
	var out []SpanRecord
	err := scanSpans(path, match, func(r *SpanRecord) {
		if filter == "" || traces[r.TraceID] {
			out = append(out, *r)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b SpanRecord) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// jsonString returns s as encoding/json writes it inside quotes.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(bytes.TrimPrefix(bytes.TrimSpace(b.Bytes()), []byte(`"`)), []byte(`"`))
}

// scanSpans calls fn for each line of path that match accepts and that
// parses as a span.
func scanSpans(path string, match func([]byte) bool, fn func(*SpanRecord)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("telemetry: read spans: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && match(line) {
			if r, ok := decodeSpan(line); ok {
				fn(&r)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("telemetry: read spans: %w", err)
		}
	}
}

// treeAttrs are the attributes RenderTree prints after a span, in order.
var treeAttrs = []string{
	string(AttrJobID), string(AttrAttempt), string(AttrExitCode), string(AttrReason),
	string(AttrHealAction), string(AttrHealOutcome), "error.type",
}

// RenderTree writes spans as one indented tree per trace: each line shows the
// span name, its service, kind, duration, start offset from the trace's first
// span, the key attributes (job id where it changes, attempt, exit code,
// reason, heal action and outcome, error.type) and, for failed spans, ERROR
// with the status message. A span whose parent is not in spans is shown as
// a root marked "(parent not recorded)".
func RenderTree(w io.Writer, spans []SpanRecord) error {
	byTrace := map[string][]SpanRecord{}
	var order []string
	for _, s := range spans {
		if _, ok := byTrace[s.TraceID]; !ok {
			order = append(order, s.TraceID)
		}
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	bw := bufio.NewWriter(w)
	for i, id := range order {
		if i > 0 {
			fmt.Fprintln(bw)
		}
		renderTrace(bw, id, byTrace[id])
	}
	return bw.Flush()
}

func renderTrace(w io.Writer, traceID string, spans []SpanRecord) {
	slices.SortStableFunc(spans, func(a, b SpanRecord) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.SpanID, b.SpanID))
	})
	start, end := spans[0].Start, spans[0].End
	ids := make(map[string]bool, len(spans))
	for _, s := range spans {
		ids[s.SpanID] = true
		if s.End.After(end) {
			end = s.End
		}
	}
	children := map[string][]SpanRecord{}
	var roots []SpanRecord
	for _, s := range spans {
		if s.ParentSpanID != "" && ids[s.ParentSpanID] && s.ParentSpanID != s.SpanID {
			children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
		} else {
			roots = append(roots, s)
		}
	}
	fmt.Fprintf(w, "trace %s  %d spans  %s\n", traceID, len(spans), fmtDuration(end.Sub(start)))

	seen := make(map[string]bool, len(spans))
	var walk func(s SpanRecord, depth int, parentJob string)
	walk = func(s SpanRecord, depth int, parentJob string) {
		if seen[s.SpanID] {
			return // a file with a parent cycle: print each span once
		}
		seen[s.SpanID] = true
		var b strings.Builder
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString(s.Name)
		if s.Service != "" {
			fmt.Fprintf(&b, " [%s]", s.Service)
		}
		if s.Kind != "" && s.Kind != "internal" {
			fmt.Fprintf(&b, " %s", s.Kind)
		}
		fmt.Fprintf(&b, " %s @+%s", fmtDuration(s.Duration()), fmtDuration(s.Start.Sub(start)))
		job := parentJob
		for _, k := range treeAttrs {
			v, ok := s.Attributes[k]
			if !ok {
				continue
			}
			val := fmt.Sprint(v)
			if k == string(AttrJobID) {
				if val == parentJob {
					continue
				}
				job = val
			}
			fmt.Fprintf(&b, " %s=%s", k, val)
		}
		if s.Status == "error" {
			b.WriteString(" ERROR")
			if s.StatusMessage != "" {
				fmt.Fprintf(&b, " %q", s.StatusMessage)
			}
		}
		if depth == 0 && s.ParentSpanID != "" && !ids[s.ParentSpanID] {
			b.WriteString(" (parent not recorded)")
		}
		fmt.Fprintln(w, b.String())
		for _, c := range children[s.SpanID] {
			walk(c, depth+1, job)
		}
	}
	for _, r := range roots {
		walk(r, 0, "")
	}
	for _, s := range spans {
		walk(s, 0, "") // spans on a parent cycle, which no root reaches
	}
}

// fmtDuration prints d at a precision that suits its size.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}
