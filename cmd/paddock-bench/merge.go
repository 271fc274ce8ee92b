package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// fleetTarget is one of the targets on a scenario measured outside
// this program (a faulttest scenario writing OUT/<scenario>.json).
type fleetTarget struct {
	scenario, field, name string
	limit                 float64
	atMost                bool // value ≤ limit passes; else value ≥ limit
}

// fleetTargets are the targets -merge checks, in the order it prints them.
var fleetTargets = []fleetTarget{
	{"e2e_idle", "p50_ms", "e2e_idle p50 ≤ 15 ms (idle fleet, submit → result)", 15, true},
	{"e2e_idle", "p99_ms", "e2e_idle p99 ≤ 50 ms", 50, true},
	{"e2e_idle", "redis_cmds_per_s", "e2e_idle idle Redis cmds/s ≤ 20", 20, true},
	{"control_plane", "ratio_to_asynq_raw_always", "control_plane ≥ 0.5 × asynq_raw jobs/s (appendfsync always, no-op executor)", 0.5, false},
	{"control_plane", "ratio_to_asynq_raw_everysec", "control_plane ≥ 0.3 × asynq_raw jobs/s (appendfsync everysec)", 0.3, false},
	{"neighbours", "p99_ratio", "neighbours p99 ≤ 1.5 × quiet p99 (chaos next door)", 1.5, true},
	{"worker_rss", "max_rss_mib", "worker_rss max RSS ≤ 64 MiB (16 × 1 GiB output)", 64, true},
	{"crash_recovery", "rerun_after_s", "crash_recovery kill -9 → re-run ≤ 20 s", 20, true},
}

// fleetScenarios are the files -merge reads, fair_share included (its rows
// carry their own pass/miss).
var fleetScenarios = []string{"e2e_idle", "control_plane", "asynq_raw", "neighbours", "worker_rss", "crash_recovery", "fair_share"}

// mergeTarget is a target line of the merged report.
type mergeTarget struct {
	target
	Measured bool   `json:"measured"`
	Note     string `json:"note,omitempty"`
}

// merge adds every OUT/<scenario>.json to OUT/latest.json (under
// scenarios, next to the engine scenarios), adds the fleet targets to its
// targets, prints the whole target table and draws OUT/targets.svg.
func merge(dir string, w io.Writer) error {
	path := filepath.Join(dir, "latest.json")
	top := map[string]json.RawMessage{}
	if data, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(data, &top); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	scs := map[string]json.RawMessage{}
	var order []string
	var targets []mergeTarget
	_ = json.Unmarshal(top["scenarios"], &scs)
	_ = json.Unmarshal(top["order"], &order)
	_ = json.Unmarshal(top["targets"], &targets)
	targets = engineTargets(targets)
	for i := range targets {
		targets[i].Measured = true
	}
	fields := map[string]map[string]any{}
	for _, name := range fleetScenarios {
		obj, err := readScenario(dir, name)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		raw, _ := json.Marshal(obj)
		scs[name] = raw
		if !contains(order, name) {
			order = append(order, name)
		}
		fields[name] = obj
	}
	for _, ft := range fleetTargets {
		targets = append(targets, ft.check(fields[ft.scenario]))
	}
	for k, v := range map[string]any{"scenarios": scs, "order": order, "targets": targets} {
		top[k], _ = json.Marshal(v)
	}
	data, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	printTargets(w, targets)
	return os.WriteFile(filepath.Join(dir, "targets.svg"), []byte(targetsSVG(targets)), 0o644)
}

// engineTargets drops fleet targets a previous merge added, so that a
// merge can run again.
func engineTargets(ts []mergeTarget) []mergeTarget {
	var out []mergeTarget
	for _, t := range ts {
		fleet := false
		for _, ft := range fleetTargets {
			fleet = fleet || t.Name == ft.name
		}
		if !fleet {
			out = append(out, t)
		}
	}
	return out
}

// readScenario reads OUT/name.json: the object under its name, or the
// whole file when it has no such key. Nil when the file is missing.
func readScenario(dir, name string) (map[string]any, error) {
	data, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s.json: %w", name, err)
	}
	if inner, ok := m[name].(map[string]any); ok {
		return inner, nil
	}
	return m, nil
}

func (ft fleetTarget) check(obj map[string]any) mergeTarget {
	t := mergeTarget{target: target{Name: ft.name, Limit: ft.limit}}
	v, ok := obj[ft.field].(float64)
	if !ok {
		t.Note = fmt.Sprintf("not measured: no %s.%s in %s.json (its scenario was skipped or failed)", ft.scenario, ft.field, ft.scenario)
		return t
	}
	t.Value, t.Measured = v, true
	t.Pass = v >= ft.limit
	if ft.atMost {
		t.Pass = v <= ft.limit
	}
	if n, ok := obj["note"].(string); ok {
		t.Note = n
	}
	return t
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func verdict(t mergeTarget) string {
	switch {
	case !t.Measured:
		return "NOT MEASURED"
	case t.Pass:
		return "pass"
	}
	return "MISS"
}

func printTargets(w io.Writer, ts []mergeTarget) {
	fmt.Fprintln(w, "\nTargets (every scenario of make bench):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmeasured\tlimit\tverdict")
	for _, t := range ts {
		m := "-"
		if t.Measured {
			m = fmt.Sprintf("%.4g", t.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%s\n", t.Name, m, t.Limit, verdict(t))
	}
	_ = tw.Flush()
}

// targetsSVG draws each target as a bar: measured over limit on a log
// scale from 0.1× to 10×, the limit at the middle line; green passes, red
// misses, grey was not measured.
func targetsSVG(ts []mergeTarget) string {
	const left, width, rowH = 420, 420, 26
	h := 50 + rowH*len(ts)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, left+width+170, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14">make bench: every target, measured ÷ limit (log scale 0.1× … 10×)</text>`)
	mid := left + width/2
	fmt.Fprintf(&b, `<line x1="%d" y1="30" x2="%d" y2="%d" stroke="#c00" stroke-dasharray="4 3"/>`, mid, mid, h-10)
	for i, t := range ts {
		y := 40 + i*rowH
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`, y+14, html.EscapeString(t.Name))
		color, x := "#999", mid
		if t.Measured && t.Limit > 0 && t.Value > 0 {
			r := logPos(t.Value / t.Limit)
			x = left + int(r*width)
			color = "#2a2"
			if !t.Pass {
				color = "#d33"
			}
		}
		x0, x1 := min(mid, x), max(mid, x)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="16" fill="%s"/>`, x0, y+2, max(x1-x0, 2), color)
		label := verdict(t)
		if t.Measured {
			label = fmt.Sprintf("%.4g vs %.4g: %s", t.Value, t.Limit, label)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, left+width+8, y+14, html.EscapeString(label))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// logPos maps a ratio to 0..1 on a log scale from 0.1 to 10.
func logPos(r float64) float64 {
	p := (math.Log10(r) + 1) / 2
	return max(0, min(1, p))
}
