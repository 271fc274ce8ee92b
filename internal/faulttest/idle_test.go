package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry"
)

// idleRow is one line of the e2e_idle table.
type idleRow struct {
	TaskCheckInterval string             `json:"task_check_interval"`
	Runs              int                `json:"runs"`
	P50MS             float64            `json:"p50_ms"`
	P90MS             float64            `json:"p90_ms"`
	P99MS             float64            `json:"p99_ms"`
	MaxMS             float64            `json:"max_ms"`
	IdleRedisCmdsPerS float64            `json:"idle_redis_cmds_per_s"`
	IdleRedisByCmd    map[string]float64 `json:"idle_redis_cmds_per_s_by_command"`
	// StagesP50MS is each stage's median (stageNames), from the spans.
	StagesP50MS map[string]float64 `json:"stages_p50_ms"`
	StagedJobs  int                `json:"staged_jobs"`
}

// e2eVariants are the configurations TestE2EIdle compares: the default
// (wake-ups; the task check interval is the idle backstop) and the plain
// asynq poll at two intervals. name=flags, flags comma separated.
const e2eVariants = "wakeups=--task-check-interval,1s;poll-100ms=--wakeups=false,--task-check-interval,100ms;poll-20ms=--wakeups=false,--task-check-interval,20ms"

// TestE2EIdle measures scenario e2e_idle: NATS submit → result received
// for `echo hi` on an idle fleet (one scheduler and one worker process,
// warm pool), one job at a time with a random 1-2 s pause between jobs so
// each lands at a random point of the idle worker's poll cycle, per
// variant (PADDOCK_E2E_VARIANTS, default e2eVariants: the first is the
// headline); the Redis command rate of the idle fleet (INFO commandstats
// over 10 s, no job running, commands run inside Lua scripts counted); and
// each job's stages from the services' spans. It is a measurement, not a
// check: it runs only with PADDOCK_E2E_IDLE=1 (PADDOCK_E2E_RUNS, default
// 30; PADDOCK_E2E_OUT, a JSON file to write).
func TestE2EIdle(t *testing.T) {
	if os.Getenv("PADDOCK_E2E_IDLE") != "1" {
		t.Skip("measurement: set PADDOCK_E2E_IDLE=1 (make bench does)")
	}
	runs, err := strconv.Atoi(envOr("PADDOCK_E2E_RUNS", "30"))
	require.NoError(t, err)
	var rows []idleRow
	for _, v := range strings.Split(envOr("PADDOCK_E2E_VARIANTS", e2eVariants), ";") {
		name, flags, _ := strings.Cut(v, "=")
		t.Run(name, func(t *testing.T) {
			r := measureIdle(t, strings.Split(flags, ","), runs)
			r.TaskCheckInterval = name
			rows = append(rows, r)
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| variant | p50 | p90 | p99 | max | idle Redis cmds/s | top idle commands |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f | %s |\n", r.TaskCheckInterval, r.P50MS, r.P90MS, r.P99MS, r.MaxMS,
			r.IdleRedisCmdsPerS, topCommands(r.IdleRedisByCmd, 3))
	}
	t.Log(b.String())
	if out := os.Getenv("PADDOCK_E2E_OUT"); out != "" && len(rows) > 0 {
		h := rows[0]
		pass := h.P50MS <= 15 && h.P99MS <= 50 && h.IdleRedisCmdsPerS <= 20
		data, err := json.MarshalIndent(map[string]any{"e2e_idle": map[string]any{
			"p50_ms": h.P50MS, "p99_ms": h.P99MS, "redis_cmds_per_s": h.IdleRedisCmdsPerS, "stages_p50_ms": h.StagesP50MS,
			"variant": h.TaskCheckInterval, "runs": runs, "pass": pass, "loadavg": loadAvg(),
			"targets": map[string]float64{"p50_ms": 15, "p99_ms": 50, "redis_cmds_per_s": 20},
			"note":    "NATS submit → result in the client, echo hi, idle fleet; Redis commands of the idle fleet (one scheduler, one worker) incl. those inside Lua scripts",
			"rows":    rows}}, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(out, data, 0o644))
	}
}

func measureIdle(t *testing.T, flags []string, runs int) idleRow {
	f := newFleet(t)
	spanFile := filepath.Join(f.dir, "spans.jsonl")
	f.scheduler("sched", "--span-file", spanFile)
	w := f.worker("w1", append(flags, "--pool-size", "2", "--span-file", spanFile)...)
	ctx := context.Background()

	// Warm up (first container profile, consumer creation), then idle.
	for range 3 {
		id := f.submit(job.Spec{Command: "echo hi"})
		f.result(id, time.Minute)
	}
	f.waitWarm(2, w.id)
	before, err := f.rdb.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	t0 := time.Now()
	// sleep: the measurement window of the idle fleet's Redis commands.
	time.Sleep(10 * time.Second)
	after, err := f.rdb.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	secs := time.Since(t0).Seconds()
	byCmd := map[string]float64{}
	total := 0.0
	a, b := commandCalls(after), commandCalls(before)
	b["info"]++ // the first INFO is counted in the second reading
	for cmd, n := range a {
		if d := float64(n - b[cmd]); d > 0 {
			byCmd[cmd] = d / secs
			total += d / secs
		}
	}

	lat := make([]time.Duration, 0, runs)
	timeline := make([]jobTimeline, 0, runs)
	for range runs {
		// sleep: idle 1-2 s before each probe, the case being measured.
		time.Sleep(time.Second + rand.N(time.Second))
		start := time.Now()
		id := f.submit(job.Spec{Command: "echo hi"})
		acked := time.Now()
		r := f.result(id, time.Minute)
		recvd := time.Now()
		lat = append(lat, recvd.Sub(start))
		timeline = append(timeline, jobTimeline{id: id, start: start, acked: acked, recvd: recvd})
		require.Equal(t, "hi\n", r.Stdout.Text)
	}
	// The services flush their spans on exit.
	w.signal(syscall.SIGTERM)
	_, _ = w.wait(30 * time.Second)
	f.procs[0].signal(syscall.SIGTERM)
	_, _ = f.procs[0].wait(30 * time.Second)
	spans, err := telemetry.ReadSpans(spanFile, "")
	require.NoError(t, err)
	perJob := stages(timeline, spans)
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	row := idleRow{TaskCheckInterval: strings.Join(flags, " "), Runs: runs, P50MS: ms(0.5), P90MS: ms(0.9), P99MS: ms(0.99),
		MaxMS: float64(lat[len(lat)-1].Microseconds()) / 1000, IdleRedisCmdsPerS: total, IdleRedisByCmd: byCmd,
		StagesP50MS: stageMedians(perJob), StagedJobs: len(perJob)}
	t.Logf("%s: p50 %.1f ms, p99 %.1f ms; idle Redis %.1f cmds/s %v; stages p50 (ms, %d jobs) %v",
		row.TaskCheckInterval, row.P50MS, row.P99MS, total, byCmd, len(perJob), row.StagesP50MS)
	return row
}

// commandCalls parses INFO commandstats: cmdstat_<name>:calls=N,…
func commandCalls(info string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

func topCommands(m map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int {
		switch {
		case a.v > b.v:
			return -1
		case a.v < b.v:
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	var parts []string
	for i, e := range all {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
