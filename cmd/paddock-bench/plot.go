package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// writeSVG draws two panels on log scales: the latency distribution of each
// scenario (box p25–p75, median bar, whiskers p1–p99, every concurrency-1
// job as a dot) one at a time and under saturation, and the sustained
// throughput (median of the rounds, each round as a small dot), with the
// issue's targets as dashed lines on the paddock rows.
func writeSVG(path string, rep *report, res []*result) error {
	const (
		width  = 1000
		left   = 120
		right  = 190
		top    = 78
		latRow = 50
		thrRow = 30
		plotW  = width - left - right
	)
	var b strings.Builder
	n := len(res)
	latTop := top
	latBottom := latTop + n*latRow
	thrTop := latBottom + 84
	thrBottom := thrTop + n*thrRow
	height := thrBottom + 60 + 16*len(rep.Targets)

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" font-weight="bold">echo hi: Paddock vs host and naive Docker</text>`+"\n", left)
	fmt.Fprintf(&b, `<text x="%d" y="46" fill="#555">%d CPUs · Docker %s · %s · %d jobs one at a time, then %d in parallel · %s</text>`+"\n",
		left, rep.Meta.CPUs, esc(rep.Meta.Docker), esc(rep.Meta.Image), rep.Config.N, rep.Config.Parallel, esc(rep.Meta.Date))

	// Panel 1: latency.
	var all []float64
	for _, r := range res {
		for _, d := range append(slices.Clone(r.lat), r.satLat...) {
			all = append(all, ms(d))
		}
	}
	lo, hi := decades(all)
	x := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, lo))
		return left + (math.Log10(v)-lo)/(hi-lo)*plotW
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Latency per job (log scale)</text>`+"\n", left, latTop-12)
	legend(&b, left+260, latTop-16, "#1f77b4", "one at a time")
	legend(&b, left+400, latTop-16, "#ff7f0e", fmt.Sprintf("%d in parallel (saturated)", rep.Config.Parallel))
	axis(&b, lo, hi, x, latTop, latBottom, msLabel)
	for i, r := range res {
		y := float64(latTop + i*latRow)
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="#000" fill-opacity="0.035"/>`+"\n", left, y, plotW, latRow)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" font-weight="bold">%s</text>`+"\n", left-10, y+latRow/2+4, esc(r.sc.name))
		s := rep.Scenarios[r.sc.name]
		boxPlot(&b, x, y+8, 16, r.lat, "#1f77b4", true)
		boxPlot(&b, x, y+30, 10, r.satLat, "#ff7f0e", false)
		vs := ""
		if s.P50VsHost != nil && r.sc.name != "host" {
			vs = fmt.Sprintf(" (%.3g× host)", *s.P50VsHost)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#1f77b4">p50 %s ms%s</text>`+"\n", width-right+10, y+20, fmtMS(s.P50), vs)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#c05a00">p50 %s ms</text>`+"\n", width-right+10, y+39, fmtMS(s.SatP50))
		if strings.HasPrefix(r.sc.name, "paddock") {
			if h, ok := rep.Scenarios["host"]; ok && h.P50 > 0 {
				drawTarget(&b, x(1.5*h.P50), y+2, y+latRow-2, "target ≤ 1.5× host p50", true, true)
			}
		}
	}

	// Panel 2: throughput.
	var rates []float64
	for _, r := range res {
		for _, rd := range r.rounds {
			if rd.JobsPerS > 0 {
				rates = append(rates, rd.JobsPerS)
			}
		}
	}
	tlo, thi := decades(rates)
	tx := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, tlo))
		return left + (math.Log10(v)-tlo)/(thi-tlo)*plotW
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Sustained throughput, %d in parallel (jobs/s, log scale; dots: rounds)</text>`+"\n", left, thrTop-12, rep.Config.Parallel)
	axis(&b, tlo, thi, tx, thrTop, thrBottom, func(v float64) string { return fmt.Sprintf("%g/s", v) })
	for i, r := range res {
		y := float64(thrTop + i*thrRow)
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="#000" fill-opacity="0.035"/>`+"\n", left, y, plotW, thrRow)
		}
		cy := y + thrRow/2
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" text-anchor="end" font-weight="bold">%s</text>`+"\n", left-10, cy+4, esc(r.sc.name))
		s := rep.Scenarios[r.sc.name]
		if s.JobsPerS <= 0 {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2ca02c" stroke-width="6" stroke-opacity="0.5"/>`+"\n", left, cy, tx(s.JobsPerS), cy)
		for _, rd := range r.rounds {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#222"/>`+"\n", tx(rd.JobsPerS), cy)
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="#2ca02c" stroke="#1a661a"/>`+"\n", tx(s.JobsPerS), cy)
		extra := ""
		if s.JobsVsEngineRaw != nil && r.sc.name != "engine_raw" {
			extra = fmt.Sprintf(" (%.3g× engine_raw)", *s.JobsVsEngineRaw)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" fill="#1a661a">%s/s%s</text>`+"\n", width-right+10, cy+4, trimNum(s.JobsPerS), extra)
		if r.sc.name == "paddock" {
			if raw, ok := rep.Scenarios["engine_raw"]; ok && raw.JobsPerS > 0 {
				drawTarget(&b, tx(0.9*raw.JobsPerS), y+2, y+thrRow-2, "≥0.9× engine_raw", false, false)
			}
			if run, ok := rep.Scenarios["docker_run"]; ok && run.JobsPerS > 0 {
				drawTarget(&b, tx(1.2*run.JobsPerS), y+2, y+thrRow-2, "≥1.2× docker_run", true, false)
			}
		}
	}

	// Footer: verdicts.
	fy := thrBottom + 46
	for _, t := range rep.Targets {
		v, col := "PASS", "#1a661a"
		if !t.Pass {
			v, col = "MISS", "#d62728"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d"><tspan fill="%s" font-weight="bold">%s</tspan> %s: %.2f vs %.2f</text>`+"\n", left, fy, col, v, esc(t.Name), t.Value, t.Limit)
		fy += 16
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// boxPlot draws one distribution at rows y..y+h.
func boxPlot(b *strings.Builder, x func(float64) float64, y, h float64, d []time.Duration, color string, dots bool) {
	if len(d) == 0 {
		return
	}
	p := func(q float64) float64 { return x(pct(d, q)) }
	cy := y + h/2
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"/>`+"\n", p(1), cy, p(99), cy, color)
	for _, q := range []float64{1, 99} {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.2"/>`+"\n", p(q), y+2, p(q), y+h-2, color)
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.25" stroke="%s"/>`+"\n",
		p(25), y, math.Max(p(75)-p(25), 1), h, color, color)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", p(50), y-2, p(50), y+h+2, color)
	if dots {
		for i, v := range d {
			jit := math.Mod(float64(i)*0.618034, 1) // golden-ratio spread
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="1.8" fill="%s" fill-opacity="0.6"/>`+"\n", x(ms(v)), y+2+jit*(h-4), color)
		}
	}
}

// axis draws decade grid lines with labels below the panel.
func axis(b *strings.Builder, lo, hi float64, x func(float64) float64, top, bottom int, label func(float64) string) {
	for e := lo; e <= hi+1e-9; e++ {
		v := math.Pow(10, e)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/>`+"\n", x(v), top, x(v), bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", x(v), bottom+16, esc(label(v)))
		if e < hi {
			for _, m := range []float64{2, 5} {
				fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e4e4"/>`+"\n", x(m*v), top, x(m*v), bottom)
			}
		}
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#444"/>`+"\n", x(math.Pow(10, lo)), bottom, x(math.Pow(10, hi)), bottom)
}

// drawTarget draws a dashed target line with its label above or below,
// on the left of the line (left) or on its right.
func drawTarget(b *strings.Builder, x, y0, y1 float64, label string, above, left bool) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-width="1.5" stroke-dasharray="4 3"/>`+"\n", x, y0, x, y1)
	ty := y0 + 9
	if !above {
		ty = y1 - 2
	}
	tx, anchor := x+4, "start"
	if left {
		tx, anchor = x-4, "end"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="10" fill="#d62728">%s</text>`+"\n", tx, ty, anchor, esc(label))
}

func legend(b *strings.Builder, x, y int, color, label string) {
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="14" height="10" fill="%s" fill-opacity="0.35" stroke="%s"/>`+"\n", x, y-9, color, color)
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", x+19, y, esc(label))
}

// decades returns the log10 range of whole decades covering v.
func decades(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 1
	}
	mn, mx := slices.Min(v), slices.Max(v)
	lo, hi = math.Floor(math.Log10(math.Max(mn, 1e-3))), math.Ceil(math.Log10(math.Max(mx, 1e-3)))
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// msLabel labels a decade of milliseconds.
func msLabel(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%g s", v/1000)
	}
	return fmt.Sprintf("%g ms", v)
}

func trimNum(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

var esc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace
