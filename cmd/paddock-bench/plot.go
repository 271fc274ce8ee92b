package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Layout of the SVG, in pixels: the plots span svgLeft..svgWidth-svgRight
// (scenario names on the left, values on the right), below a header of
// svgTop; each scenario takes a row of svgLatRow in the latency panel and
// svgThrRow in the throughput panel.
const (
	svgWidth  = 1000
	svgLeft   = 120
	svgRight  = 190
	svgTop    = 78
	svgLatRow = 50
	svgThrRow = 30
	svgPlotW  = svgWidth - svgLeft - svgRight
)

// writeSVG draws two panels on log scales: the latency distribution of each
// scenario (box p25–p75, median bar, whiskers p1–p99, every concurrency-1
// job as a dot) one at a time and under saturation, and the sustained
// throughput (median of the rounds, each round as a small dot), with the
// issue's targets as dashed lines on the paddock rows.
func writeSVG(path string, rep *report, res []*result) error {
	var b strings.Builder
	n := len(res)
	latTop := svgTop
	latBottom := latTop + n*svgLatRow
	thrTop := latBottom + 84
	thrBottom := thrTop + n*svgThrRow
	height := thrBottom + 60 + 16*len(rep.Targets)

	svgHeader(&b, rep, height)
	latencyPanel(&b, rep, res, latTop, latBottom)
	throughputPanel(&b, rep, res, thrTop, thrBottom)
	verdicts(&b, rep, thrBottom+46)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// svgHeader opens the SVG document and draws the title and the run's
// machine and parameters.
func svgHeader(b *strings.Builder, rep *report, height int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", svgWidth, height, svgWidth, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, height)
	fmt.Fprintf(b, `<text x="%d" y="26" font-size="17" font-weight="bold">echo hi: Paddock vs host and naive Docker</text>`+"\n", svgLeft)
	fmt.Fprintf(b, `<text x="%d" y="46" fill="#555">%d CPUs · Docker %s · %s · %d jobs one at a time, then %d in parallel · %s</text>`+"\n",
		svgLeft, rep.Meta.CPUs, esc(rep.Meta.Docker), esc(rep.Meta.Image), rep.Config.N, rep.Config.Parallel, esc(rep.Meta.Date))
}

// logScale maps a value to its x on a log10 axis spanning the decades
// lo..hi over the plot width; values below 10^lo sit on the left edge.
func logScale(lo, hi float64) func(float64) float64 {
	return func(v float64) float64 {
		v = math.Max(v, math.Pow(10, lo))
		return svgLeft + (math.Log10(v)-lo)/(hi-lo)*svgPlotW
	}
}

// rowLabel shades every other row (i odd) of a panel, starting at y and
// h high, and writes the scenario name left of the plot at baseline ty.
func rowLabel(b *strings.Builder, i int, y float64, h int, ty float64, name string) {
	if i%2 == 1 {
		fmt.Fprintf(b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="#000" fill-opacity="0.035"/>`+"\n", svgLeft, y, svgPlotW, h)
	}
	fmt.Fprintf(b, `<text x="%d" y="%.0f" text-anchor="end" font-weight="bold">%s</text>`+"\n", svgLeft-10, ty, esc(name))
}

// latencyPanel draws panel 1: per scenario, the latency one at a time (with
// every job as a dot) and under saturation, their p50s on the right, and
// on the paddock rows the target of 1.5× the host's p50.
func latencyPanel(b *strings.Builder, rep *report, res []*result, latTop, latBottom int) {
	var all []float64
	for _, r := range res {
		for _, d := range append(slices.Clone(r.lat), r.satLat...) {
			all = append(all, ms(d))
		}
	}
	lo, hi := decades(all)
	x := logScale(lo, hi)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Latency per job (log scale)</text>`+"\n", svgLeft, latTop-12)
	legend(b, svgLeft+260, latTop-16, "#1f77b4", "one at a time")
	legend(b, svgLeft+400, latTop-16, "#ff7f0e", fmt.Sprintf("%d in parallel (saturated)", rep.Config.Parallel))
	axis(b, lo, hi, x, latTop, latBottom, msLabel)
	for i, r := range res {
		y := float64(latTop + i*svgLatRow)
		rowLabel(b, i, y, svgLatRow, y+svgLatRow/2+4, r.sc.name)
		s := rep.Scenarios[r.sc.name]
		boxPlot(b, x, y+8, 16, r.lat, "#1f77b4", true)
		boxPlot(b, x, y+30, 10, r.satLat, "#ff7f0e", false)
		vs := ""
		if s.P50VsHost != nil && r.sc.name != "host" {
			vs = fmt.Sprintf(" (%.3g× host)", *s.P50VsHost)
		}
		fmt.Fprintf(b, `<text x="%d" y="%.0f" fill="#1f77b4">p50 %s ms%s</text>`+"\n", svgWidth-svgRight+10, y+20, fmtMS(s.P50), vs)
		fmt.Fprintf(b, `<text x="%d" y="%.0f" fill="#c05a00">p50 %s ms</text>`+"\n", svgWidth-svgRight+10, y+39, fmtMS(s.SatP50))
		if strings.HasPrefix(r.sc.name, "paddock") {
			if h, ok := rep.Scenarios["host"]; ok && h.P50 > 0 {
				drawTarget(b, x(1.5*h.P50), y+2, y+svgLatRow-2, "target ≤ 1.5× host p50", true, true)
			}
		}
	}
}

// throughputPanel draws panel 2: per scenario, the median rate of the
// rounds as a bar, each round as a dot, the rate on the right, and on the
// paddock row the targets of 0.9× engine_raw and 1.2× docker_run.
func throughputPanel(b *strings.Builder, rep *report, res []*result, thrTop, thrBottom int) {
	var rates []float64
	for _, r := range res {
		for _, rd := range r.rounds {
			if rd.JobsPerS > 0 {
				rates = append(rates, rd.JobsPerS)
			}
		}
	}
	tlo, thi := decades(rates)
	tx := logScale(tlo, thi)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Sustained throughput, %d in parallel (jobs/s, log scale; dots: rounds)</text>`+"\n", svgLeft, thrTop-12, rep.Config.Parallel)
	axis(b, tlo, thi, tx, thrTop, thrBottom, func(v float64) string { return fmt.Sprintf("%g/s", v) })
	for i, r := range res {
		y := float64(thrTop + i*svgThrRow)
		cy := y + svgThrRow/2
		rowLabel(b, i, y, svgThrRow, cy+4, r.sc.name)
		s := rep.Scenarios[r.sc.name]
		if s.JobsPerS <= 0 {
			continue
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#2ca02c" stroke-width="6" stroke-opacity="0.5"/>`+"\n", svgLeft, cy, tx(s.JobsPerS), cy)
		for _, rd := range r.rounds {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="#222"/>`+"\n", tx(rd.JobsPerS), cy)
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="5" fill="#2ca02c" stroke="#1a661a"/>`+"\n", tx(s.JobsPerS), cy)
		extra := ""
		if s.JobsVsEngineRaw != nil && r.sc.name != "engine_raw" {
			extra = fmt.Sprintf(" (%.3g× engine_raw)", *s.JobsVsEngineRaw)
		}
		fmt.Fprintf(b, `<text x="%d" y="%.0f" fill="#1a661a">%s/s%s</text>`+"\n", svgWidth-svgRight+10, cy+4, trimNum(s.JobsPerS), extra)
		if r.sc.name == "paddock" {
			if raw, ok := rep.Scenarios["engine_raw"]; ok && raw.JobsPerS > 0 {
				drawTarget(b, tx(0.9*raw.JobsPerS), y+2, y+svgThrRow-2, "≥0.9× engine_raw", false, false)
			}
			if run, ok := rep.Scenarios["docker_run"]; ok && run.JobsPerS > 0 {
				drawTarget(b, tx(1.2*run.JobsPerS), y+2, y+svgThrRow-2, "≥1.2× docker_run", true, false)
			}
		}
	}
}

// verdicts writes the footer: one PASS or MISS line per target, the first
// at baseline fy.
func verdicts(b *strings.Builder, rep *report, fy int) {
	for _, t := range rep.Targets {
		v, col := "PASS", "#1a661a"
		if !t.Pass {
			v, col = "MISS", "#d62728"
		}
		fmt.Fprintf(b, `<text x="%d" y="%d"><tspan fill="%s" font-weight="bold">%s</tspan> %s: %.2f vs %.2f</text>`+"\n", svgLeft, fy, col, v, esc(t.Name), t.Value, t.Limit)
		fy += 16
	}
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
