package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

type report struct {
	Scenarios map[string]scenarioOut `json:"scenarios"`
	Order     []string               `json:"order"`
	Targets   []target               `json:"targets"`
	Config    configOut              `json:"config"`
	Meta      meta                   `json:"meta"`
}

type scenarioOut struct {
	P50      float64 `json:"p50_ms"`
	P90      float64 `json:"p90_ms"`
	P99      float64 `json:"p99_ms"`
	JobsPerS float64 `json:"jobs_per_s"`

	Description string  `json:"description"`
	N           int     `json:"n"`
	Min         float64 `json:"min_ms"`
	Max         float64 `json:"max_ms"`
	// Saturated* are job latencies during the throughput rounds.
	SatP50 float64 `json:"saturated_p50_ms"`
	SatP90 float64 `json:"saturated_p90_ms"`
	Rounds []round `json:"rounds"`
	// JobsPerSDrained counts the background work left after each round.
	JobsPerSDrained float64 `json:"jobs_per_s_drained"`
	// Steps are the p50 of each step of a job at concurrency 1.
	Steps     map[string]float64 `json:"steps_p50_ms,omitempty"`
	StepOrder []string           `json:"step_order,omitempty"`
	Counts    map[string]int     `json:"counts,omitempty"`
	Errors    int                `json:"errors"`
	// Samples are the concurrency-1 latencies in run order; SatQuantiles
	// are p0, p1, … p100 of the saturated latencies (for -replot).
	Samples      []float64 `json:"samples_ms"`
	SatQuantiles []float64 `json:"saturated_quantiles_ms,omitempty"`

	P50VsHost       *float64 `json:"p50_vs_host,omitempty"`
	JobsVsEngineRaw *float64 `json:"jobs_per_s_vs_engine_raw,omitempty"`
	JobsVsDockerRun *float64 `json:"jobs_per_s_vs_docker_run,omitempty"`
}

type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Pass  bool    `json:"pass"`
}

type configOut struct {
	N           int     `json:"n"`
	Warmup      int     `json:"warmup"`
	GapMS       float64 `json:"gap_ms"`
	Parallel    int     `json:"parallel"`
	JobsPerRnd  int     `json:"min_jobs_per_round"`
	MinDurS     float64 `json:"min_round_s"`
	Rounds      int     `json:"rounds"`
	PaddockPool int     `json:"paddock_pool_size"`
}

type meta struct {
	Date        string  `json:"date"`
	CPUs        int     `json:"cpus"`
	Docker      string  `json:"docker"`
	API         string  `json:"api"`
	Kernel      string  `json:"kernel"`
	Go          string  `json:"go"`
	Image       string  `json:"image"`
	ElapsedS    float64 `json:"elapsed_s"`
	PaddockPool string  `json:"paddock_pool,omitempty"`
}

// finite rounds to 4 decimals (0.1 µs for milliseconds) and maps NaN to 0.
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return math.Round(f*1e4) / 1e4
}

func ratio(a, b float64) *float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return nil
	}
	r := finite(a / b)
	return &r
}

func buildReport(res []*result, o options, m meta) *report {
	rep := &report{Scenarios: map[string]scenarioOut{}, Meta: m, Config: configOut{
		N: o.n, Warmup: o.warmup, GapMS: ms(o.gap), Parallel: o.parallel, JobsPerRnd: o.jobs, MinDurS: o.minDur.Seconds(),
		Rounds: o.rounds, PaddockPool: 2,
	}}
	for _, r := range res {
		s := scenarioOut{
			P50: finite(pct(r.lat, 50)), P90: finite(pct(r.lat, 90)), P99: finite(pct(r.lat, 99)),
			Min: finite(pct(r.lat, 0)), Max: finite(pct(r.lat, 100)),
			JobsPerS: finite(r.jobsPerS()), Description: r.sc.desc, N: len(r.lat),
			SatP50: finite(pct(r.satLat, 50)), SatP90: finite(pct(r.satLat, 90)),
			Rounds: r.rounds, JobsPerSDrained: finite(r.jobsPerSDrained()), Steps: map[string]float64{}, StepOrder: r.stepOrder, Errors: r.errors,
		}
		for _, name := range r.stepOrder {
			s.Steps[name] = finite(pct(r.stepLat[name], 50))
		}
		for _, d := range r.lat {
			s.Samples = append(s.Samples, finite(ms(d)))
		}
		if len(r.satLat) > 0 {
			for q := 0; q <= 100; q++ {
				s.SatQuantiles = append(s.SatQuantiles, finite(pct(r.satLat, float64(q))))
			}
		}
		if len(r.counts) > 0 {
			s.Counts = r.counts
		}
		rep.Scenarios[r.sc.name] = s
		rep.Order = append(rep.Order, r.sc.name)
	}
	host, hasHost := rep.Scenarios["host"]
	raw, hasRaw := rep.Scenarios["engine_raw"]
	run, hasRun := rep.Scenarios["docker_run"]
	for name, s := range rep.Scenarios {
		if hasHost {
			s.P50VsHost = ratio(s.P50, host.P50)
		}
		if hasRaw {
			s.JobsVsEngineRaw = ratio(s.JobsPerS, raw.JobsPerS)
		}
		if hasRun {
			s.JobsVsDockerRun = ratio(s.JobsPerS, run.JobsPerS)
		}
		rep.Scenarios[name] = s
	}
	if p, ok := rep.Scenarios["paddock"]; ok {
		if hasHost {
			rep.Targets = append(rep.Targets, target{Name: "paddock p50 ≤ 1.5 × host p50 (ms)", Value: p.P50, Limit: finite(1.5 * host.P50), Pass: p.P50 <= 1.5*host.P50})
		}
		if hasRaw {
			rep.Targets = append(rep.Targets, target{Name: "paddock jobs/s ≥ 0.9 × engine_raw", Value: p.JobsPerS, Limit: finite(0.9 * raw.JobsPerS), Pass: p.JobsPerS >= 0.9*raw.JobsPerS})
		}
		if hasRun {
			rep.Targets = append(rep.Targets, target{Name: "paddock jobs/s ≥ 1.2 × docker_run", Value: p.JobsPerS, Limit: finite(1.2 * run.JobsPerS), Pass: p.JobsPerS >= 1.2*run.JobsPerS})
		}
		if st, ok := rep.Scenarios["engine_start"]; ok {
			rep.Targets = append(rep.Targets, target{Name: "paddock jobs/s ≥ 0.9 × engine_start", Value: p.JobsPerS, Limit: finite(0.9 * st.JobsPerS), Pass: p.JobsPerS >= 0.9*st.JobsPerS})
		}
	}
	if p, ok := rep.Scenarios["paddock_bash"]; ok && hasHost { // informational: the Script (bash) path
		rep.Targets = append(rep.Targets, target{Name: "(info) paddock_bash p50 ≤ 1.5 × host p50 (ms)", Value: p.P50, Limit: finite(1.5 * host.P50), Pass: p.P50 <= 1.5*host.P50})
	}
	return rep
}

func fmtRatio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f×", *r)
}

func fmtMS(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func printTable(w io.Writer, rep *report, res []*result) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tp50 ms\tp90 ms\tp99 ms\tp50 vs host\tjobs/s @%d\tvs engine_raw\tvs docker_run\tp50 ms @%d\t\n", rep.Config.Parallel, rep.Config.Parallel)
	for _, name := range rep.Order {
		s := rep.Scenarios[name]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t\n", name, fmtMS(s.P50), fmtMS(s.P90), fmtMS(s.P99),
			fmtRatio(s.P50VsHost), s.JobsPerS, fmtRatio(s.JobsVsEngineRaw), fmtRatio(s.JobsVsDockerRun), fmtMS(s.SatP50))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range res {
		s := rep.Scenarios[r.sc.name]
		var parts []string
		for _, name := range s.StepOrder {
			parts = append(parts, fmt.Sprintf("%s %s", name, fmtMS(s.Steps[name])))
		}
		var rounds []string
		for _, rd := range s.Rounds {
			x := fmt.Sprintf("%.1f", rd.JobsPerS)
			if rd.DrainS > 0 {
				x += fmt.Sprintf(" (drain %.1fs)", rd.DrainS)
			}
			rounds = append(rounds, x)
		}
		line := fmt.Sprintf("  %-11s steps p50 ms: %s; rounds jobs/s: %s", r.sc.name, strings.Join(parts, ", "), strings.Join(rounds, ", "))
		if len(s.Counts) > 0 {
			keys := make([]string, 0, len(s.Counts))
			for k := range s.Counts {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var cs []string
			for _, k := range keys {
				cs = append(cs, fmt.Sprintf("%s %d", k, s.Counts[k]))
			}
			line += "; at concurrency 1: " + strings.Join(cs, ", ")
		}
		fmt.Fprintln(w, line)
	}
	if rep.Meta.PaddockPool != "" {
		fmt.Fprintf(w, "  paddock pool over the whole run: %s\n", rep.Meta.PaddockPool)
	}
	fmt.Fprintln(w)
	for _, t := range rep.Targets {
		v := "PASS"
		if !t.Pass {
			v = "MISS"
		}
		fmt.Fprintf(w, "target %-44s %s  (%.2f vs limit %.2f)\n", t.Name, v, t.Value, t.Limit)
	}
	fmt.Fprintln(w)
}

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// replot redraws the SVG from a latest.json.
func replot(jsonPath, svgPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	var res []*result
	for _, name := range rep.Order {
		s := rep.Scenarios[name]
		r := newResult(&scenario{name: name, desc: s.Description})
		for _, v := range s.Samples {
			r.lat = append(r.lat, time.Duration(v*float64(time.Millisecond)))
		}
		for _, v := range s.SatQuantiles {
			r.satLat = append(r.satLat, time.Duration(v*float64(time.Millisecond)))
		}
		r.rounds = s.Rounds
		res = append(res, r)
	}
	return writeSVG(svgPath, &rep, res)
}
