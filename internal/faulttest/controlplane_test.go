package faulttest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// cpRound is one measured round of the control_plane scenario.
type cpRound struct {
	Jobs        int64   `json:"jobs"` // results received in the window
	Seconds     float64 `json:"seconds"`
	JobsPerS    float64 `json:"jobs_per_s"`
	Submitted   int     `json:"submitted"` // over the whole round, warm-up included
	RedisCmds   float64 `json:"redis_cmds_per_job"`
	RedisReads  float64 `json:"redis_reads_per_job"` // read events: round trips, pipelines counted once
	NATSInMsgs  float64 `json:"nats_in_msgs_per_job"`
	NATSOutMsgs float64 `json:"nats_out_msgs_per_job"`
	LoadAvg     string  `json:"loadavg"`
	// CPUMSPerJob is each process's CPU time per job over the window: on
	// this host all of them share its cores.
	CPUMSPerJob map[string]float64 `json:"cpu_ms_per_job"`
	// Where the backlog waited at the window's end: in the tenant's
	// submissions stream (not yet taken by the scheduler), or in asynq's
	// pending list (enqueued, not yet taken by the worker).
	StreamPending uint64 `json:"stream_pending_at_end"`
	StreamAcking  int    `json:"stream_ack_pending_at_end"` // taken, held until the result
	QueuePending  int64  `json:"asynq_pending_at_end"`
	QueueActive   int64  `json:"asynq_active_at_end"` // taken by a worker, not done

	byCmd    map[string]float64
	families map[string]map[string]float64 // key family → command → per job (MONITOR)
}

// cpConfig is the scenario's knobs (PADDOCK_CP_* variables).
type cpConfig struct {
	rounds, backlog, chunk int
	variants               []cpVariant
	warmup, window         time.Duration
	schedConc, workerConc  string
	rawTasks               int // asynq_raw tasks per round; 0 skips asynq_raw
	// monitor is the MONITOR window after each round's (redisFamilies);
	// 0 skips it.
	monitor time.Duration
}

func cpConfigFromEnv(t *testing.T) cpConfig {
	atoi := func(k, def string) int {
		n, err := strconv.Atoi(envOr(k, def))
		require.NoError(t, err, k)
		return n
	}
	dur := func(k, def string) time.Duration {
		d, err := time.ParseDuration(envOr(k, def))
		require.NoError(t, err, k)
		return d
	}
	return cpConfig{rounds: atoi("PADDOCK_CP_ROUNDS", "3"), variants: parseCPVariants(envOr("PADDOCK_CP_VARIANTS", "default:")), backlog: atoi("PADDOCK_CP_BACKLOG", "3000"),
		chunk: atoi("PADDOCK_CP_CHUNK", "250"), warmup: dur("PADDOCK_CP_WARMUP", "3s"), window: dur("PADDOCK_CP_WINDOW", "10s"),
		schedConc: envOr("PADDOCK_CP_SCHED_CONCURRENCY", "64"), workerConc: envOr("PADDOCK_CP_WORKER_CONCURRENCY", "128"),
		rawTasks: atoi("PADDOCK_CP_RAW_TASKS", "5000"), monitor: dur("PADDOCK_CP_MONITOR", "2s")}
}

// cpVariant is one worker configuration measured: a worker process of its
// own, running only while its rounds are measured (SIGSTOP otherwise), so
// that variants are compared round by round on the same host load.
type cpVariant struct {
	Name  string   `json:"name"`
	Flags []string `json:"flags"`
	// Redis is CONFIG SET during the variant's rounds (an "@key=value"
	// item of PADDOCK_CP_VARIANTS), e.g. appendfsync=everysec.
	Redis  map[string]string `json:"redis_config,omitempty"`
	proc   *proc
	rounds []cpRound
	raw    []rawRound // asynq_raw after each round, on the same Redis settings
}

// parseCPVariants reads PADDOCK_CP_VARIANTS: "name:flag,flag,@key=value;name:flag".
func parseCPVariants(s string) []cpVariant {
	var vs []cpVariant
	for _, v := range strings.Split(s, ";") {
		name, flags, _ := strings.Cut(strings.TrimSpace(v), ":")
		cv := cpVariant{Name: name}
		for _, fl := range strings.Split(flags, ",") {
			if k, v, ok := strings.Cut(strings.TrimPrefix(fl, "@"), "="); ok && strings.HasPrefix(fl, "@") {
				if cv.Redis == nil {
					cv.Redis = map[string]string{}
				}
				cv.Redis[k] = v
			} else if fl != "" {
				cv.Flags = append(cv.Flags, fl)
			}
		}
		vs = append(vs, cv)
	}
	return vs
}

// TestControlPlane measures scenario control_plane: jobs through NATS →
// scheduler → asynq → worker → result with the worker's no-op executor
// (no Docker), sustained. One scheduler and one worker process (fair share
// off, high concurrency); the test keeps a backlog of submitted jobs
// (SubmitBatch) and counts results as they are published, over a window
// after a warm-up, for each round; the median round is the figure. It also
// counts Redis commands and read events (round trips) and NATS messages
// per job over the window, and writes both services' CPU profiles. After
// each round it runs asynq_raw (asynq alone, no-op tasks) on the same Redis
// with the same settings, so that the control plane is judged as a ratio to
// the queue it is built on, measured side by side. A measurement, not a
// check: it runs only with PADDOCK_CONTROL_PLANE=1 (PADDOCK_CONTROL_PLANE_OUT:
// the JSON file; asynq_raw.json and the profiles go next to it;
// PADDOCK_CP_RAW_TASKS: asynq_raw tasks per round, 0 skips it).
func TestControlPlane(t *testing.T) {
	if os.Getenv("PADDOCK_CONTROL_PLANE") != "1" {
		t.Skip("measurement: set PADDOCK_CONTROL_PLANE=1 (make bench does)")
	}
	cfg := cpConfigFromEnv(t)
	out := os.Getenv("PADDOCK_CONTROL_PLANE_OUT")
	profDir := t.TempDir()
	if out != "" {
		profDir = filepath.Dir(out)
	}
	prof := func(svc string) string { return filepath.Join(profDir, "control_plane.cpu."+svc+".pprof") }

	f := newFleet(t)
	sched := f.scheduler("sched", "--slots", "0", "--tenant-max-running", "10000000",
		"--scheduler-concurrency", cfg.schedConc, "--cpu-profile", prof("scheduler"))
	procs := []*proc{sched}
	profiles := map[string]string{"scheduler": prof("scheduler")}
	vs := cfg.variants
	for i := range vs {
		svc := "worker"
		if i > 0 {
			svc += "-" + vs[i].Name
		}
		profiles[svc] = prof(svc)
		args := append([]string{"--concurrency", cfg.workerConc, "--cpu-profile", prof(svc)}, vs[i].Flags...)
		vs[i].proc = f.noopWorker("w"+strconv.Itoa(i), args...)
		procs = append(procs, vs[i].proc)
		if i > 0 {
			vs[i].proc.signal(syscall.SIGSTOP)
		}
	}
	for i := range cfg.rounds {
		for v := range vs {
			vs[v].proc.signal(syscall.SIGCONT)
			restore := f.redisConfig(t, vs[v].Redis)
			r := measureControlPlane(t, f, cfg, map[string]int{"scheduler": sched.cmd.Process.Pid, "worker": vs[v].proc.cmd.Process.Pid})
			if cfg.rawTasks > 0 {
				raw := measureAsynqRaw(t, f.rdb.Options(), cfg.rawTasks, 16)
				t.Logf("round %d %s: asynq_raw %d tasks in %.2f s = %.0f jobs/s (appendfsync %s)", i+1, vs[v].Name, raw.Tasks, raw.Seconds, raw.JobsPerS, raw.Appendfsync)
				vs[v].raw = append(vs[v].raw, raw)
			}
			restore()
			if len(vs) > 1 {
				vs[v].proc.signal(syscall.SIGSTOP) // after its round drained: it holds no task
			}
			t.Logf("round %d %s: %d jobs in %.1f s = %.0f jobs/s; %.1f Redis cmds (%.1f reads), %.1f/%.1f NATS msgs in/out per job; load %s",
				i+1, vs[v].Name, r.Jobs, r.Seconds, r.JobsPerS, r.RedisCmds, r.RedisReads, r.NATSInMsgs, r.NATSOutMsgs, r.LoadAvg)
			vs[v].rounds = append(vs[v].rounds, r)
		}
	}
	for _, v := range vs {
		v.proc.signal(syscall.SIGCONT)
	}
	// SIGTERM: the services stop and write their profiles.
	for _, p := range procs {
		p.signal(syscall.SIGTERM)
		_, ok := p.wait(time.Minute)
		require.True(t, ok, "%s did not stop on SIGTERM", p.name)
	}
	res := controlPlaneResult(t, vs, profiles)
	raw, ratios := asynqRawResult(vs)
	for k, v := range ratios {
		res[k] = v
	}
	t.Log(controlPlaneTable(res, vs) + asynqRawTable(vs) + familyTable(median(vs[0].rounds).families))
	if out != "" {
		// asynq_raw.json goes beside control_plane.json.
		for path, obj := range map[string]map[string]any{out: {"control_plane": res}, filepath.Join(filepath.Dir(out), "asynq_raw.json"): {"asynq_raw": raw}} {
			data, err := json.MarshalIndent(obj, "", "  ")
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, data, 0o644))
		}
	}
}

// redisConfig sets Redis settings (CONFIG SET) and returns what sets the
// old values back.
func (f *fleet) redisConfig(t *testing.T, set map[string]string) (restore func()) {
	ctx := context.Background()
	old := map[string]string{}
	for k, v := range set {
		cur, err := f.rdb.ConfigGet(ctx, k).Result()
		require.NoError(t, err)
		old[k] = cur[k]
		require.NoError(t, f.rdb.ConfigSet(ctx, k, v).Err())
	}
	return func() {
		for k, v := range old {
			require.NoError(t, f.rdb.ConfigSet(ctx, k, v).Err())
		}
	}
}

// noopWorker starts a `paddock worker --noop-executor` (PADDOCK_BENCH=1 in
// its environment) and waits for its heartbeat.
func (f *fleet) noopWorker(name string, extra ...string) *proc {
	f.t.Helper()
	id := f.name + "-" + name
	logPath := filepath.Join(f.dir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(f.t, err)
	defer lf.Close()
	args := append([]string{"worker"}, f.common()...)
	args = append(args, "--worker-id", id, "--noop-executor", "--shutdown-timeout", "5s")
	cmd := exec.Command(bins.paddock, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(childEnv(), "PADDOCK_BENCH=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(f.t, cmd.Start(), "start %s", name)
	p := &proc{name: name, id: id, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	f.waitFor(30*time.Second, name+" heartbeat", func() bool {
		if p.exited() {
			f.t.Fatalf("%s exited before it was ready: %v\n%s", name, p.err, p.tail(30))
		}
		n, err := f.rdb.Exists(context.Background(), "paddock:worker:"+id).Result()
		return err == nil && n == 1
	})
	return p
}

// cpCounters is what a round reads before and after its window.
type cpCounters struct {
	at       time.Time
	results  int64
	cmds     map[string]int64
	reads    int64
	natsIn   int64
	natsOut  int64
	commands int64
	cpu      map[string]float64 // process → CPU seconds used (utime+stime)
}

func (f *fleet) cpCounters(t *testing.T, results *atomic.Int64, pids map[string]int) cpCounters {
	ctx := context.Background()
	cpu := map[string]float64{}
	srv, err := f.rdb.Info(ctx, "server").Result()
	require.NoError(t, err)
	pids["redis"], pids["test (NATS server, client)"] = int(infoInt(srv, "process_id")), os.Getpid()
	for name, pid := range pids {
		cpu[name] = cpuSeconds(pid)
	}
	cs, err := f.rdb.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	st, err := f.rdb.Info(ctx, "stats").Result()
	require.NoError(t, err)
	vz, err := f.nats.Server.Varz(&server.VarzOptions{})
	require.NoError(t, err)
	return cpCounters{at: time.Now(), results: results.Load(), cmds: commandCalls(cs),
		reads: infoInt(st, "total_reads_processed"), commands: infoInt(st, "total_commands_processed"),
		natsIn: vz.InMsgs, natsOut: vz.OutMsgs, cpu: cpu}
}

// cpuSeconds is the CPU time a process has used (/proc/pid/stat utime and
// stime, at the usual 100 ticks a second).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ") // after the command name
	fs := strings.Fields(rest)
	if len(fs) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(fs[11], 64)
	st, _ := strconv.ParseFloat(fs[12], 64)
	return (u + st) / 100
}

// cpDepth reads where the backlog waits (cpRound's *_at_end fields).
func (f *fleet) cpDepth(t *testing.T) cpRound {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r cpRound
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	if c, err := js.Consumer(ctx, job.JobsStream(f.client.Tenant()), job.ConsumerSchedulers); err == nil {
		if info, err := c.Info(ctx); err == nil {
			r.StreamPending, r.StreamAcking = info.NumPending, info.NumAckPending
		}
	}
	r.QueuePending, _ = f.rdb.LLen(ctx, "asynq:{"+job.DefaultQueue+"}:pending").Result()
	r.QueueActive, _ = f.rdb.LLen(ctx, "asynq:{"+job.DefaultQueue+"}:active").Result()
	return r
}

// infoInt reads field name of an INFO section.
func infoInt(info, name string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// measureControlPlane runs one round: a submitter keeps cfg.backlog jobs
// submitted and not yet ended, results are counted as they are published;
// the window starts after the warm-up. Every job of the round must then
// end succeeded, run once, with the no-op executor's note.
func measureControlPlane(t *testing.T, f *fleet, cfg cpConfig, pids map[string]int) cpRound {
	var (
		mu      sync.Mutex
		states  = map[string]job.Result{}
		counted atomic.Int64
		ended   = make(chan struct{}, 1) // a result was counted
	)
	tenant := f.client.Tenant()
	sub, err := f.nc.Subscribe(job.ResultSubjects(tenant), func(m *nats.Msg) {
		_, id, ok := job.ParseResultSubject(m.Subject)
		var r job.Result
		if !ok || json.Unmarshal(m.Data, &r) != nil {
			return
		}
		mu.Lock()
		if _, seen := states[id]; !seen {
			counted.Add(1)
			select {
			case ended <- struct{}{}:
			default: // the submitter has a signal pending already
			}
		}
		states[id] = r
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, f.nc.Flush())

	ctx, stop := context.WithCancel(context.Background())
	ids := make(chan []string, 1)
	go func() { ids <- cpSubmit(ctx, t, f, cfg, &counted, ended) }()
	// sleep: the warm-up, then the measurement window (time is what is measured over).
	time.Sleep(cfg.warmup)
	before := f.cpCounters(t, &counted, pids)
	time.Sleep(cfg.window)
	after := f.cpCounters(t, &counted, pids)
	depth := f.cpDepth(t)
	var families map[string]map[string]float64
	if cfg.monitor > 0 { // after the window: MONITOR slows Redis
		mctx, cancel := context.WithTimeout(context.Background(), cfg.monitor)
		n0 := counted.Load()
		lines := monitorRedis(mctx, t, f.rdb.Options())
		cancel()
		families = redisFamilies(lines, counted.Load()-n0)
	}
	stop()
	all := <-ids
	r := cpRoundOf(before, after)
	r.Submitted, r.families = len(all), families
	r.StreamPending, r.StreamAcking, r.QueuePending, r.QueueActive = depth.StreamPending, depth.StreamAcking, depth.QueuePending, depth.QueueActive

	// Every submitted job ends, once, succeeded, through the no-op executor.
	f.waitFor(3*time.Minute, "every result of the round", func() bool { return counted.Load() >= int64(len(all)) })
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		res, ok := states[id]
		require.True(t, ok, "no result for %s", id)
		require.Equal(t, job.StateSucceeded, res.State, "%s: %s", id, res.Error)
		require.Equal(t, 1, res.Runs, id)
		require.Len(t, res.Attempts, 1, id)
		require.Contains(t, res.Attempts[0].Note, worker.NoopNote, id)
	}
	return r
}

// cpSubmit submits chunks of jobs while fewer than cfg.backlog are
// outstanding, until ctx ends, and returns the ids it submitted. At the
// backlog it waits for a signal on progress (a result counted in ended).
func cpSubmit(ctx context.Context, t *testing.T, f *fleet, cfg cpConfig, ended *atomic.Int64, progress <-chan struct{}) []string {
	var ids []string
	base := ended.Load()
	for ctx.Err() == nil {
		if int64(len(ids))-(ended.Load()-base) >= int64(cfg.backlog) {
			select {
			case <-progress:
			case <-ctx.Done():
			}
			continue
		}
		specs := make([]job.Spec, cfg.chunk)
		for i := range specs {
			specs[i] = job.Spec{Command: "true"}
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		subs, err := f.client.SubmitBatch(sctx, specs, nil)
		cancel()
		if err != nil {
			t.Errorf("submit batch: %v", err)
			return ids
		}
		for _, s := range subs {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// cpRoundOf is the round's figures from the counters around its window.
func cpRoundOf(before, after cpCounters) cpRound {
	jobs := after.results - before.results
	secs := after.at.Sub(before.at).Seconds()
	per := func(d int64) float64 { return float64(d) / float64(max(jobs, 1)) }
	r := cpRound{Jobs: jobs, Seconds: secs, JobsPerS: float64(jobs) / secs, byCmd: map[string]float64{},
		RedisCmds: per(after.commands - before.commands - 2), RedisReads: per(after.reads - before.reads),
		NATSInMsgs: per(after.natsIn - before.natsIn), NATSOutMsgs: per(after.natsOut - before.natsOut)}
	r.CPUMSPerJob = map[string]float64{}
	for name, c := range after.cpu {
		r.CPUMSPerJob[name] = round1((c-before.cpu[name])*1000/float64(max(jobs, 1))*10) / 10
	}
	for cmd, n := range after.cmds {
		if d := n - before.cmds[cmd]; d > 0 && cmd != "info" {
			r.byCmd[cmd] = per(d)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return r
}

// median is the median round by jobs/s.
func median(rounds []cpRound) cpRound {
	sorted := slices.Clone(rounds)
	slices.SortFunc(sorted, func(a, b cpRound) int { return cmp.Compare(a.JobsPerS, b.JobsPerS) })
	return sorted[len(sorted)/2]
}

// controlPlaneResult is the scenario's JSON: the first variant's median
// round, its Redis and NATS counts, every variant's median and its ratio
// to the first's, and the services' top functions.
func controlPlaneResult(t *testing.T, vs []cpVariant, profiles map[string]string) map[string]any {
	med := median(vs[0].rounds)
	var variants []map[string]any
	for _, v := range vs {
		m := median(v.rounds)
		variants = append(variants, map[string]any{"name": v.Name, "flags": v.Flags, "jobs_per_s": round1(m.JobsPerS),
			"ratio_to_first": round1(m.JobsPerS/med.JobsPerS*100) / 100, "rounds": v.rounds,
			"redis_round_trips_per_job": round1(m.RedisReads), "redis_cmds_per_job": round1(m.RedisCmds), "redis_config": v.Redis,
			"cpu_ms_per_job": m.CPUMSPerJob})
	}
	top := map[string]any{}
	flat := map[string]any{}
	for svc, p := range profiles {
		top[svc] = pprofTop(t, p, "-cum")
		flat[svc] = pprofTop(t, p, "-flat")
	}
	return map[string]any{
		"jobs_per_s": round1(med.JobsPerS),
		"variant":    vs[0].Name, "rounds": vs[0].rounds, "variants": variants, "redis_cmds_per_job": round1(med.RedisCmds), "redis_round_trips_per_job": round1(med.RedisReads),
		"redis_by_cmd_per_job": roundMap(med.byCmd), "redis_by_key_per_job": med.families, "nats_msgs_per_job": round1(med.NATSInMsgs),
		"nats_out_msgs_per_job": round1(med.NATSOutMsgs), "cpu_ms_per_job": med.CPUMSPerJob, "cpu_top": top, "cpu_top_flat": flat,
		"profiles": profiles,
		"note": "one scheduler and one worker process (no-op executor, no Docker) on the bench host, with the NATS " +
			"server and the submitting client in the test process; the host's 2 cores are shared by all of them and Redis.",
	}
}

// pprofTop is the first 10 rows of `go tool pprof -top <order>` of a profile.
func pprofTop(t *testing.T, profile, order string) []map[string]any {
	b, err := exec.Command("go", "tool", "pprof", "-top", order, "-nodecount=10", profile).Output()
	if err != nil {
		t.Logf("go tool pprof %s: %v", profile, err)
		return nil
	}
	var rows []map[string]any
	header := false
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) >= 5 && fs[0] == "flat" {
			header = true
			continue
		}
		if !header || len(fs) < 6 {
			continue
		}
		pct := func(s string) float64 { v, _ := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64); return v }
		rows = append(rows, map[string]any{"func": strings.Join(fs[5:], " "), "flat_pct": pct(fs[1]), "cum_pct": pct(fs[4])})
	}
	return rows
}

func roundMap(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if r := round1(v); r > 0 {
			out[k] = r
		}
	}
	return out
}

// controlPlaneTable is the scenario's markdown table: every round of
// every variant, then each variant's median.
func controlPlaneTable(res map[string]any, vs []cpVariant) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| variant | round | jobs | jobs/s | Redis cmds/job | Redis round trips/job | NATS msgs in/out per job | backlog at end: stream / held / asynq pending / active | load |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range vs {
		for i, r := range v.rounds {
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.1f | %.1f | %.1f / %.1f | %d / %d / %d / %d | %s |\n", v.Name, i+1, r.Jobs, r.JobsPerS, r.RedisCmds, r.RedisReads,
				r.NATSInMsgs, r.NATSOutMsgs, r.StreamPending, r.StreamAcking, r.QueuePending, r.QueueActive, r.LoadAvg)
		}
	}
	for _, v := range vs {
		m := median(v.rounds)
		fmt.Fprintf(&b, "\n%s (%s %v): median %.0f jobs/s; CPU ms per job %v", v.Name, strings.Join(v.Flags, " "), v.Redis, m.JobsPerS, m.CPUMSPerJob)
	}
	fmt.Fprintf(&b, "\n\ncontrol_plane (%s): median %.0f jobs/s; Redis per job: %v\n", vs[0].Name, res["jobs_per_s"], res["redis_by_cmd_per_job"])
	return b.String()
}
