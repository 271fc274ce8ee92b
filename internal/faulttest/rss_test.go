package faulttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// rssPattern is what every job of the worker_rss scenario prints, over and
// over (`yes` adds the newline), cut at the job's byte count by `head -c`.
const rssPattern = "0123456789abcdef"

// rssTargetMiB is the bound on the worker's RSS with 16 jobs each
// printing 1 GiB.
const rssTargetMiB = 64

// rssScenario is one line of the worker_rss table.
type rssScenario struct {
	Name        string  `json:"name"`
	Keep        bool    `json:"keep"`
	Jobs        int     `json:"jobs"`
	BytesPerJob int64   `json:"bytes_per_job"`
	IdleRSSMiB  float64 `json:"idle_rss_mib"` // before the scenario's jobs
	MaxRSSMiB   float64 `json:"max_rss_mib"`
	// HWMMiB is the kernel's peak RSS (VmHWM) over the scenario: it is
	// reset before each scenario (clear_refs 5), so it also catches a peak
	// between two 100 ms samples.
	HWMMiB float64 `json:"vm_hwm_mib"`
	// AnonMiB and FileMiB split the largest sample: the process's own
	// memory (heap, stacks, runtime) and its mapped file pages (the
	// binary's text and data).
	AnonMiB    float64 `json:"max_sample_rss_anon_mib"`
	FileMiB    float64 `json:"max_sample_rss_file_mib"`
	HWMReset   bool    `json:"vm_hwm_reset"`
	Samples    int     `json:"samples"`
	WallS      float64 `json:"wall_s"`
	GiBPerS    float64 `json:"gib_per_s"`
	StartSpanS float64 `json:"start_spread_s"` // last job's start minus the first's
	// MaxAtS is when the largest sample was taken, FirstEndS and LastEndS
	// when the first and the last job finished, all in seconds since the
	// submission: a peak at the end is the results being recorded, one
	// before it the streams.
	MaxAtS    float64        `json:"max_rss_at_s"`
	FirstEndS float64        `json:"first_end_s"`
	LastEndS  float64        `json:"last_end_s"`
	Reasons   map[string]int `json:"reasons"`
	// CPUS is the worker's CPU time over the scenario (user + system, from
	// /proc), CPUSPerGiB that per GiB printed, and GCs the garbage
	// collections it ran (its /metrics): what a GOMEMLIMIT costs.
	CPUS       float64 `json:"worker_cpu_s"`
	CPUSPerGiB float64 `json:"worker_cpu_s_per_gib"`
	GCs        float64 `json:"gc_cycles"`
	GoMemLimit string  `json:"gomemlimit,omitempty"`
	// Runtime is the worker's Go runtime view (its /metrics) at the
	// scrape, once a second, of the largest heap in use.
	Runtime map[string]float64 `json:"runtime_at_peak_heap_mib,omitempty"`
	// Kept (scenario keep): the results whose stdout object is 1 GiB with
	// the expected sha256, and the one object read back from the store.
	KeptOK       int    `json:"kept_objects_ok,omitempty"`
	KeptReadBack string `json:"kept_read_back,omitempty"`
	// Valid: every job ended ok having printed its bytes, and (keep) every
	// stdout was kept whole; else Problems says what went wrong, and the
	// RSS figure is not the one the scenario is about.
	Valid    bool     `json:"valid"`
	Problems []string `json:"problems,omitempty"`
}

// TestWorkerRSS measures scenario worker_rss: the resident memory of one
// `paddock worker` process (concurrency 16) while 16 jobs each print
// 1 GiB, all at once, with the output only streamed (live, rate-bounded,
// dropped with markers) and then also kept whole in the Object Store. The
// worker's VmRSS is sampled every 100 ms; its VmHWM is read at the end of
// each scenario. After the keep scenario every kept stdout object must be
// 1 GiB with the sha256 of the deterministic stream, and one is read back
// and hashed. Side by side, the naive alternative: one process that
// captures one such command's output in memory (exec.Cmd.Output), once,
// not 16 times, to spare the machine. A measurement: a missed target is
// reported (pass false), not failed; a job that did not end ok or an
// output not kept whole fails the test, since the figure is then not the
// scenario's. It runs only with PADDOCK_WORKER_RSS=1 (PADDOCK_WORKER_RSS_JOBS,
// default 16; PADDOCK_WORKER_RSS_BYTES, default 1073741824;
// PADDOCK_WORKER_RSS_OUT, default bench/out/worker_rss.json). To look
// closer: PADDOCK_WORKER_RSS_GOMEMLIMIT (e.g. 40MiB) is the worker's
// GOMEMLIMIT (the worker's only); PADDOCK_WORKER_RSS_PPROF_DIR saves the
// worker's heap profile at each new peak of its heap (through its
// --debug-addr; the profiles perturb the figures a little);
// PADDOCK_WORKER_RSS_ONLY=stream or keep runs one scenario (the result is
// then not valid for the table).
func TestWorkerRSS(t *testing.T) {
	if os.Getenv("PADDOCK_WORKER_RSS") != "1" {
		t.Skip("measurement: set PADDOCK_WORKER_RSS=1 (make bench does)")
	}
	jobs, err := strconv.Atoi(envOr("PADDOCK_WORKER_RSS_JOBS", "16"))
	require.NoError(t, err)
	size, err := strconv.ParseInt(envOr("PADDOCK_WORKER_RSS_BYTES", strconv.Itoa(1<<30)), 10, 64)
	require.NoError(t, err)
	out := envOr("PADDOCK_WORKER_RSS_OUT", filepath.Join("..", "..", "bench", "out", "worker_rss.json"))
	want := patternSHA256(size)

	f := newFleet(t)
	sizeMiB := (size + 1<<20 - 1) >> 20
	// The caps the 16 jobs need: a command may print its 1 GiB without
	// the output kill (default 256 MiB), a kept stream is not cut (default
	// 2 GiB), and the tenant's output bucket holds all 16 (default 4 GiB).
	only := os.Getenv("PADDOCK_WORKER_RSS_ONLY") // investigating: "stream" or "keep"
	// 256 MiB over the output: the objects' metas and stderr, the chunks'
	// headers (about 20 MiB for 16 GiB).
	quota := strconv.FormatInt(int64(jobs)*size+(256<<20), 10)
	if only == "stream" {
		// Nothing is kept: JetStream need not reserve twice that (both
		// buckets take the quota) out of 75% of the free disk.
		quota = strconv.FormatInt(results.DefaultStoredMaxBytes, 10)
	}
	f.scheduler("sched", "--tenant-max-stored-bytes", quota, "--slots", strconv.Itoa(jobs))
	metrics := freeAddr(t)
	args := []string{"--concurrency", strconv.Itoa(jobs), "--pool-size", "2",
		"--output-kill-mb", strconv.FormatInt(2*sizeMiB, 10), "--max-kept-mb", strconv.FormatInt(max(2*sizeMiB, 2048), 10),
		"--tenant-max-stored-bytes", quota, "--metrics-addr", metrics}
	prof := rssProfiler{dir: os.Getenv("PADDOCK_WORKER_RSS_PPROF_DIR")}
	if prof.dir != "" {
		require.NoError(t, os.MkdirAll(prof.dir, 0o755))
		prof.addr = freeAddr(t)
		args = append(args, "--debug-addr", prof.addr)
	}
	// An operator's GOMEMLIMIT for the worker only (this process read its
	// own at start, so setting it now changes only the child).
	limit := os.Getenv("PADDOCK_WORKER_RSS_GOMEMLIMIT")
	if limit != "" {
		t.Setenv("GOMEMLIMIT", limit)
	}
	w := f.worker("w1", args...)
	if limit != "" {
		os.Unsetenv("GOMEMLIMIT")
	}
	pid := w.cmd.Process.Pid

	// Warm up: the image's first container, the buckets, the live stream.
	r := f.result(f.submit(job.Spec{Command: "echo hi"}), 2*time.Minute)
	require.Equal(t, job.ReasonOK, r.Reason, "warm-up: %+v", r)
	f.waitWarm(2, w.id)

	var rows []rssScenario
	for _, keep := range []bool{false, true} {
		name := map[bool]string{false: "stream", true: "keep"}[keep]
		if only != "" && only != name {
			continue
		}
		t.Run(name, func(t *testing.T) {
			rows = append(rows, rssScenario{})
			row := &rows[len(rows)-1]
			ids := measureRSS(t, f, pid, metrics, prof, row, name, keep, jobs, size)
			if keep {
				verifyKept(t, f, row, ids, size, want)
			}
		})
	}
	naive := measureNaive(t, size)

	peak, valid := 0.0, len(rows) == 2
	for _, r := range rows {
		peak = max(peak, r.MaxRSSMiB, r.HWMMiB)
		valid = valid && r.Valid
	}
	pass := valid && peak <= rssTargetMiB
	var b strings.Builder
	fmt.Fprintf(&b, "\n| scenario | jobs × bytes | RSS at start | max RSS (100 ms samples) | VmHWM | wall | through the worker | reasons | valid |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d × %d MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f s | %.2f GiB/s | %v | %v |\n", r.Name, r.Jobs, r.BytesPerJob>>20,
			r.IdleRSSMiB, r.MaxRSSMiB, r.HWMMiB, r.WallS, r.GiBPerS, r.Reasons, r.Valid)
	}
	fmt.Fprintf(&b, "| naive capture (exec.Cmd.Output, 1 job only) | 1 × %d MiB | | | %.1f MiB | %.1f s | %.2f GiB/s | | |\n",
		size>>20, naive.HWMMiB, naive.WallS, float64(size)/(1<<30)/naive.WallS)
	fmt.Fprintf(&b, "\nworker max RSS %.1f MiB; target ≤ %d MiB: %s", peak, rssTargetMiB, passMiss(pass))
	if !valid {
		fmt.Fprintf(&b, " (a scenario is not valid: see its problems)")
	}
	for _, r := range rows {
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "\n%s: %s", r.Name, p)
		}
	}
	t.Log(b.String())
	for _, r := range rows {
		t.Logf("%s: worker runtime at its peak heap (MiB): %v", r.Name, r.Runtime)
	}

	require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
	data, err := json.MarshalIndent(map[string]any{"worker_rss": map[string]any{
		"max_rss_mib": peak, "target_mib": rssTargetMiB, "pass": pass, "valid": valid, "scenarios": rows,
		"naive_capture_1job_rss_mib": naive.HWMMiB, "naive_capture": naive,
		"note": "one worker process, --concurrency " + strconv.Itoa(jobs) + "; RSS of the worker process only (not dockerd, containerd-shim, NATS or the containers); the naive capture runs 1 job, not 16, to spare the machine",
	}}, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(out, data, 0o644))
	t.Logf("wrote %s", out)
}

// measureRSS runs jobs jobs printing size bytes each, all submitted at
// once, while sampling the worker's RSS into row; it returns the ids.
func measureRSS(t *testing.T, f *fleet, pid int, metrics string, prof rssProfiler, row *rssScenario, name string, keep bool, jobs int, size int64) []string {
	*row = rssScenario{Name: name, Keep: keep, Jobs: jobs, BytesPerJob: size, Reasons: map[string]int{}, Valid: true}
	row.HWMReset = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	idle, err := procRSS(pid)
	require.NoError(t, err)
	row.IdleRSSMiB = idle.rss
	row.GoMemLimit = os.Getenv("PADDOCK_WORKER_RSS_GOMEMLIMIT")
	cpu0, gc0 := procCPU(pid), scrapeRuntime(metrics)["gc_cycles"]

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	t0 := time.Now()
	wg.Add(2)
	go func() { // VmRSS every 100 ms
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := procRSS(pid); err == nil {
				mu.Lock()
				if m.rss > row.MaxRSSMiB {
					row.MaxRSSMiB, row.AnonMiB, row.FileMiB = m.rss, m.anon, m.file
					row.MaxAtS = time.Since(t0).Seconds()
				}
				row.Samples++
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	go func() { // the Go runtime's view, once a second
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if m := scrapeRuntime(metrics); m != nil && m["heap_inuse"] >= row.Runtime["heap_inuse"] {
				mu.Lock()
				row.Runtime = m
				mu.Unlock()
				prof.save(name)
			}
		}
	}()

	cmdTimeout, jobTimeout := int64(300), int64(600)
	specs := make([]job.Spec, jobs)
	for i := range specs {
		specs[i] = job.Spec{Command: fmt.Sprintf("yes %s | head -c %d", rssPattern, size),
			Limits: job.Limits{CommandTimeoutS: &cmdTimeout, JobTimeoutS: &jobTimeout},
			Heal:   &job.HealPolicy{Mode: job.HealOff}, Output: &job.OutputPolicy{Keep: &keep}}
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	subs, err := f.client.SubmitBatch(sctx, specs, nil)
	cancel()
	require.NoError(t, err)
	ids := make([]string, len(subs))
	var first, last, firstEnd, lastEnd time.Time
	for i, s := range subs {
		ids[i] = s.ID
	}
	for _, id := range ids {
		r := f.result(id, 20*time.Minute)
		row.Reasons[string(r.Reason)]++
		if firstEnd.IsZero() || r.FinishedAt.Before(firstEnd) {
			firstEnd = r.FinishedAt
		}
		lastEnd = later(lastEnd, r.FinishedAt)
		if first.IsZero() || r.StartedAt.Before(first) {
			first = r.StartedAt
		}
		if r.StartedAt.After(last) {
			last = r.StartedAt
		}
		if !assert.Equal(t, job.ReasonOK, r.Reason, "job %s: %s %s", id, r.State, r.Error) ||
			!assert.Equal(t, size, r.Stdout.Bytes, "job %s printed", id) {
			row.problem("job %s: %s/%s after %d stdout bytes: %s", id, r.State, r.Reason, r.Stdout.Bytes, r.Error)
		}
	}
	row.WallS = time.Since(t0).Seconds()
	stop()
	wg.Wait()
	end, err := procRSS(pid)
	require.NoError(t, err)
	row.HWMMiB = end.hwm
	row.CPUS = procCPU(pid) - cpu0
	row.CPUSPerGiB = row.CPUS / (float64(int64(jobs)*size) / (1 << 30))
	row.GCs = scrapeRuntime(metrics)["gc_cycles"] - gc0
	row.GiBPerS = float64(int64(jobs)*size) / (1 << 30) / row.WallS
	row.StartSpanS = last.Sub(first).Seconds()
	row.FirstEndS, row.LastEndS = firstEnd.Sub(t0).Seconds(), lastEnd.Sub(t0).Seconds()
	t.Logf("%s: %d jobs × %d bytes in %.1f s (%.2f GiB/s, starts spread over %.1f s, ends at %.1f–%.1f s); worker RSS idle %.1f MiB, max %.1f MiB at %.1f s (anon %.1f, file %.1f) over %d samples, VmHWM %.1f MiB (reset: %v); reasons %v; worker CPU %.1f s (%.2f s/GiB), %.0f GCs, GOMEMLIMIT %q",
		name, jobs, size, row.WallS, row.GiBPerS, row.StartSpanS, row.FirstEndS, row.LastEndS, row.IdleRSSMiB, row.MaxRSSMiB, row.MaxAtS, row.AnonMiB, row.FileMiB, row.Samples, row.HWMMiB, row.HWMReset, row.Reasons,
		row.CPUS, row.CPUSPerGiB, row.GCs, row.GoMemLimit)
	return ids
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// problem records what makes the scenario not valid (the first few).
func (r *rssScenario) problem(format string, args ...any) {
	r.Valid = false
	if len(r.Problems) < 3 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	} else if len(r.Problems) == 3 {
		r.Problems = append(r.Problems, "…")
	}
}

// verifyKept checks every job's kept stdout on its result (size, sha256,
// not cut), reads one whole object back from the bucket and hashes it,
// then deletes the objects (GiBs of the fleet's temp dir).
func verifyKept(t *testing.T, f *fleet, row *rssScenario, ids []string, size int64, want string) {
	ctx := context.Background()
	js, err := jetstream.New(f.nc)
	require.NoError(t, err)
	bucket, err := js.ObjectStore(ctx, job.OutBucket(job.DefaultTenant))
	require.NoError(t, err)
	defer func() {
		for _, id := range ids {
			_ = bucket.Delete(ctx, job.StdoutObject(id, 1))
			_ = bucket.Delete(ctx, job.StderrObject(id, 1))
		}
	}()
	good := ""
	for _, id := range ids {
		r, err := f.client.Get(ctx, id)
		require.NoError(t, err)
		if r.Kept == nil {
			assert.Fail(t, "no kept output on the result", "job %s", id)
			row.problem("job %s: no kept output on its result", id)
			continue
		}
		o := r.Kept.Stdout
		ok := assert.Equal(t, job.StdoutObject(id, 1), o.Name, "job %s: %s", id, o.Note)
		ok = assert.Equal(t, size, o.Bytes, "job %s kept", id) && ok
		ok = assert.Equal(t, want, o.SHA256, "job %s kept sha256", id) && ok
		ok = assert.False(t, o.Truncated, "job %s: %s", id, o.Note) && ok
		if !ok {
			row.problem("job %s: stdout not kept whole: name %q, %d bytes, sha256 %q, note %q", id, o.Name, o.Bytes, o.SHA256, o.Note)
			continue
		}
		row.KeptOK++
		if good == "" {
			good = o.Name
		}
	}
	t.Logf("kept: %d of %d results name a %d-byte stdout object with the expected sha256 %s", row.KeptOK, len(ids), size, want)
	if good == "" {
		return
	}
	// Read one back: the result's numbers are the worker's; this is the
	// store's. (Without a deadline, Get gives the whole read 5 s.)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	obj, err := bucket.Get(rctx, good)
	if !assert.NoError(t, err, "get %s", good) {
		row.problem("get %s: %v", good, err)
		return
	}
	defer obj.Close()
	h := sha256.New()
	n, err := io.Copy(h, obj)
	got := hex.EncodeToString(h.Sum(nil))
	if !assert.NoError(t, err) || !assert.Equal(t, size, n, "object read back") || !assert.Equal(t, want, got, "object read back: sha256") {
		row.problem("read back %s: %d bytes, sha256 %s, err %v", good, n, got, err)
	}
	row.KeptReadBack = fmt.Sprintf("%s: %d bytes, sha256 %s", good, n, got)
	t.Logf("read back %s", row.KeptReadBack)
}

// patternSHA256 is the sha256 of the first size bytes of `yes rssPattern`,
// hashed incrementally.
func patternSHA256(size int64) string {
	line := rssPattern + "\n"
	block := []byte(strings.Repeat(line, (64<<10)/len(line))) // whole lines, ~64 KiB
	h := sha256.New()
	for size > 0 {
		n := min(size, int64(len(block)))
		h.Write(block[:n])
		size -= n
	}
	return hex.EncodeToString(h.Sum(nil))
}

// procCPU is pid's user + system CPU time in seconds (/proc/<pid>/stat,
// at the usual 100 ticks a second), or 0.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// memSample is one reading of /proc/<pid>/status, in MiB.
type memSample struct{ rss, hwm, anon, file float64 }

// procRSS reads VmRSS, VmHWM, RssAnon and RssFile of pid.
func procRSS(pid int) (memSample, error) {
	var m memSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	fields := map[string]*float64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "RssAnon": &m.anon, "RssFile": &m.file}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		dst, ok := fields[k]
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return m, fmt.Errorf("%s: %q: %w", k, v, err)
		}
		*dst = kb / 1024
	}
	return m, nil
}

// scrapeClient asks for uncompressed answers: a gzip writer per scrape
// (about 1 MiB) would be the measurement's own garbage in the worker's heap.
var scrapeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// scrapeRuntime reads the worker's Go memory figures from its /metrics
// (MiB; goroutines as a count), or nil.
func scrapeRuntime(addr string) map[string]float64 {
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	names := map[string]string{
		"go_memstats_heap_inuse_bytes": "heap_inuse", "go_memstats_heap_alloc_bytes": "heap_alloc",
		"go_memstats_heap_idle_bytes": "heap_idle", "go_memstats_heap_released_bytes": "heap_released",
		"go_memstats_next_gc_bytes": "next_gc", "go_memstats_stack_inuse_bytes": "stack_inuse",
		"go_memstats_sys_bytes": "sys", "go_goroutines": "goroutines", "process_resident_memory_bytes": "rss",
		"go_gc_duration_seconds_count": "gc_cycles",
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if short, known := names[k]; ok && known {
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				continue
			}
			if short != "goroutines" && short != "gc_cycles" {
				x /= 1 << 20
			}
			m[short] = x
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// rssProfiler saves the worker's heap profile (its --debug-addr) at each
// new peak of its heap in use, as <dir>/<scenario>.heap.pb.gz; off when
// dir is "" (PADDOCK_WORKER_RSS_PPROF_DIR unset).
type rssProfiler struct{ dir, addr string }

func (p rssProfiler) save(name string) {
	if p.dir == "" {
		return
	}
	resp, err := scrapeClient.Get("http://" + p.addr + "/debug/pprof/heap")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return
	}
	_ = os.WriteFile(filepath.Join(p.dir, name+".heap.pb.gz"), b, 0o644)
}

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

// naiveRun is the naive alternative: a Go process that captures one
// command's whole output in memory.
type naiveRun struct {
	Command string  `json:"command"`
	Jobs    int     `json:"jobs"`
	Bytes   int64   `json:"bytes"`
	HWMMiB  float64 `json:"vm_hwm_mib"`
	// MaxRSSMiB is the child's rusage peak (it includes sh, yes, head).
	MaxRSSMiB float64 `json:"rusage_maxrss_mib"`
	WallS     float64 `json:"wall_s"`
}

// naiveSrc captures argv[1]'s stdout with exec.Cmd.Output and reports
// the length and its own VmHWM.
const naiveSrc = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func main() {
	out, err := exec.Command("sh", "-c", os.Args[1]).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	st, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			fmt.Println(len(out), strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")))
		}
	}
}
`

// measureNaive builds and runs the naive capture once, on the host.
func measureNaive(t *testing.T, size int64) naiveRun {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module naive\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(naiveSrc), 0o644))
	bin := filepath.Join(dir, "naive")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "build the naive capture: %s", b)

	n := naiveRun{Command: fmt.Sprintf("yes %s | head -c %d", rssPattern, size), Jobs: 1, Bytes: size}
	cmd := exec.Command(bin, n.Command)
	t0 := time.Now()
	outb, err := cmd.Output()
	n.WallS = time.Since(t0).Seconds()
	require.NoError(t, err)
	var got int64
	var kb float64
	_, err = fmt.Sscanf(string(outb), "%d %f kB", &got, &kb)
	require.NoError(t, err, "naive output %q", outb)
	require.Equal(t, size, got)
	n.HWMMiB = kb / 1024
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		n.MaxRSSMiB = float64(ru.Maxrss) / 1024
	}
	t.Logf("naive capture of 1 job (exec.Cmd.Output of %d bytes): VmHWM %.1f MiB (rusage maxrss %.1f MiB), %.1f s",
		size, n.HWMMiB, n.MaxRSSMiB, n.WallS)
	return n
}
