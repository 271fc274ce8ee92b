// Command paddock-bench measures, side by side in one run, `echo hi` run
// on the host (fork+exec), through Paddock's sandbox (warm pool of fresh,
// capped, single-use containers; with sh -c as every other scenario, and
// with bash -c as the worker runs a Script), by docker exec into one
// long-lived container, by one `docker run --rm` per command, and through
// the engine's raw container lifecycle (create+attach+start+wait+remove, no
// Paddock code). docs/benchmarks.md describes the method and the results.
//
// Two phases, both interleaved so that a noisy, shared machine hurts every
// scenario alike:
//
//   - latency: one job at a time. Each iteration runs one job of every
//     scenario, in an order rotated by one per iteration; before each
//     measured job every scenario's background work (Paddock's removals and
//     pool refill) is allowed to finish, so each job meets an idle host.
//   - throughput: -parallel jobs at a time for at least -jobs jobs and
//     -min-duration, per scenario, for -rounds rounds in alternating order.
//     A round's rate counts completions after the first -parallel ones
//     (start-up excluded); the reported rate is the median of the rounds.
//     Paddock defers container removal and pool refill off the critical
//     path; the time that work takes after a round's last job is reported
//     as drain_s, and jobs_per_s_drained counts it in.
//
// It prints a table, writes OUT/latest.json and draws OUT/latency.svg.
// `make bench` runs it through scripts/bench.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox"
)

type options struct {
	image, initPath, out, only string
	n, warmup, parallel, jobs  int
	rounds                     int
	minDur, gap                time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.image, "image", "paddock/test:latest", "image of every container scenario")
	flag.StringVar(&o.initPath, "init", "", "paddock-init binary (default: bin/paddock-init, else sandbox.DefaultInitPath)")
	flag.StringVar(&o.out, "out", "bench/out", "output directory (latest.json, latency.svg)")
	flag.StringVar(&o.only, "only", "", "comma-separated subset of scenarios (default all)")
	flag.IntVar(&o.n, "n", 30, "measured jobs per scenario at concurrency 1")
	flag.IntVar(&o.warmup, "warmup", 3, "unmeasured jobs per scenario before the latency phase")
	flag.IntVar(&o.parallel, "parallel", 4, "jobs in flight in the throughput phase")
	flag.IntVar(&o.jobs, "jobs", 24, "minimum jobs per scenario per throughput round")
	flag.DurationVar(&o.minDur, "min-duration", 2*time.Second, "minimum length of a throughput round")
	flag.DurationVar(&o.gap, "gap", 50*time.Millisecond, "idle time before each measured job of the latency phase, after background work ended")
	flag.IntVar(&o.rounds, "rounds", 3, "throughput rounds per scenario (the median is reported)")
	replotFrom := flag.String("replot", "", "only redraw OUT/latency.svg from this latest.json")
	mergeOnly := flag.Bool("merge", false, "only merge the fleet scenarios' OUT/<scenario>.json into OUT/latest.json, print every target and draw OUT/targets.svg")
	flag.Parse()
	if *mergeOnly {
		if err := merge(o.out, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "paddock-bench: merge:", err)
			os.Exit(1)
		}
		return
	}
	if *replotFrom != "" {
		if err := replot(*replotFrom, filepath.Join(o.out, "latency.svg")); err != nil {
			fmt.Fprintln(os.Stderr, "paddock-bench:", err)
			os.Exit(1)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "paddock-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	initPath, err := initBinary(o.initPath)
	if err != nil {
		return err
	}
	d, ver, err := connectEngine(ctx, o.image)
	if err != nil {
		return err
	}
	defer d.Close()
	runID := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	// Scenarios, in table order. Everything created is removed on return.
	var set scenarioSet
	defer set.close(d, runID)
	if err := set.build(ctx, d, o, initPath, runID); err != nil {
		return err
	}
	res := make([]*result, len(set.scs))
	for i, sc := range set.scs {
		res[i] = newResult(sc)
	}

	start := time.Now()
	fmt.Printf("paddock-bench: %d scenarios, image %s, %d CPUs, Docker %s (API %s)\n",
		len(set.scs), o.image, runtime.NumCPU(), ver.Version, ver.APIVersion)
	if err := measure(ctx, res, o); err != nil {
		return err
	}
	elapsed := time.Since(start)

	rep := buildReport(res, o, meta{
		Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), Docker: ver.Version,
		API: ver.APIVersion, Kernel: kernelRelease(), Go: runtime.Version(), Image: o.image,
		ElapsedS: elapsed.Seconds(),
	})
	if set.rt != nil {
		s := set.rt.Stats()
		rep.Meta.PaddockPool = fmt.Sprintf("hits %d, cold starts %d, removed %d", s.Hits.Load(), s.ColdStarts.Load(), s.Removed.Load())
	}
	printTable(os.Stdout, rep, res)
	if err := writeOutputs(o.out, rep, res, elapsed); err != nil {
		return err
	}
	for _, r := range res {
		if r.errors > 0 {
			return fmt.Errorf("%s: %d jobs failed, first: %s", r.sc.name, r.errors, r.firstErr)
		}
	}
	return nil
}

// initBinary returns the absolute path of the paddock-init binary: path,
// or when empty bin/paddock-init if it exists, else sandbox.DefaultInitPath.
func initBinary(path string) (string, error) {
	if path == "" {
		path = "bin/paddock-init"
		if _, err := os.Stat(path); err != nil {
			path = sandbox.DefaultInitPath()
		}
	}
	return filepath.Abs(path)
}

// connectEngine connects to the Docker engine of the environment, checks
// that image is there and returns the engine's version. The caller closes
// the client.
func connectEngine(ctx context.Context, image string) (*client.Client, client.ServerVersionResult, error) {
	d, err := client.New(client.FromEnv)
	if err != nil {
		return nil, client.ServerVersionResult{}, err
	}
	if _, err := d.ImageInspect(ctx, image); err != nil {
		d.Close()
		return nil, client.ServerVersionResult{}, fmt.Errorf("image %s: %w (run `make images`)", image, err)
	}
	ver, err := d.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		d.Close()
		return nil, client.ServerVersionResult{}, fmt.Errorf("docker engine: %w", err)
	}
	return d, ver, nil
}

// scenarioSet is what run measures: the scenarios -only selects, in table
// order, and what must be released with them.
type scenarioSet struct {
	scs []*scenario
	// unused are the closers of scenarios built alongside a selected one
	// (paddock and paddock_bash share one Runtime) but not selected.
	unused []func()
	// rt is the Paddock runtime, if a paddock scenario was built.
	rt *sandbox.Runtime
}

// build creates the scenarios o.only selects. On error, what was built so
// far is still released by close.
func (set *scenarioSet) build(ctx context.Context, d *client.Client, o options, initPath, runID string) error {
	selected := func(name string) bool {
		return o.only == "" || slices.Contains(strings.Split(o.only, ","), name)
	}
	if selected("host") {
		set.scs = append(set.scs, hostScenario())
	}
	if selected("paddock") || selected("paddock_bash") {
		pss, r, err := paddockScenarios(ctx, d, o.image, initPath, runID)
		if err != nil {
			return fmt.Errorf("paddock: %w", err)
		}
		set.rt = r
		for _, sc := range pss {
			if selected(sc.name) {
				set.scs = append(set.scs, sc)
			} else if sc.close != nil {
				set.unused = append(set.unused, sc.close)
			}
		}
	}
	if selected("docker_exec") {
		sc, err := dockerExecScenario(ctx, d, o.image, runID)
		if err != nil {
			return err
		}
		set.scs = append(set.scs, sc)
	}
	if selected("docker_run") {
		set.scs = append(set.scs, dockerRunScenario(o.image, runID))
	}
	if selected("engine_raw") {
		set.scs = append(set.scs, engineRawScenario(d, o.image, runID))
	}
	if selected("engine_start") {
		set.scs = append(set.scs, engineStartScenario(d, o.image, runID))
	}
	if len(set.scs) == 0 {
		return fmt.Errorf("no scenario selected by -only %q", o.only)
	}
	return nil
}

// close releases the unselected scenarios, then the selected ones in
// reverse order, then removes any container still labelled with runID.
func (set *scenarioSet) close(d *client.Client, runID string) {
	for _, c := range slices.Backward(set.unused) {
		c()
	}
	for _, sc := range slices.Backward(set.scs) {
		if sc.close != nil {
			sc.close()
		}
	}
	if n, err := removeLabelled(d, runID); err != nil || n > 0 {
		fmt.Fprintf(os.Stderr, "cleanup: removed %d leftover containers (%v)\n", n, err)
	}
}

// measure runs the latency phase, then the throughput phase.
func measure(ctx context.Context, res []*result, o options) error {
	fmt.Printf("latency: %d warm-up + %d measured jobs per scenario, one at a time, interleaved\n", o.warmup, o.n)
	if err := latencyPhase(ctx, res, o); err != nil {
		return err
	}
	fmt.Printf("throughput: %d rounds × ≥%d jobs and ≥%v per scenario, %d in parallel, alternating order\n",
		o.rounds, o.jobs, o.minDur, o.parallel)
	return throughputPhase(ctx, res, o)
}

// writeOutputs writes latest.json and latency.svg into dir and says so.
func writeOutputs(dir string, rep *report, res []*result, elapsed time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "latest.json"), rep); err != nil {
		return err
	}
	if err := writeSVG(filepath.Join(dir, "latency.svg"), rep, res); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %s in %v\n", filepath.Join(dir, "latest.json"), filepath.Join(dir, "latency.svg"), elapsed.Round(time.Second))
	return nil
}

// settleAll waits until no scenario has background work left.
func settleAll(ctx context.Context, res []*result) error {
	for _, r := range res {
		if r.sc.settle != nil {
			if err := r.sc.settle(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func latencyPhase(ctx context.Context, res []*result, o options) error {
	k := len(res)
	for i := -o.warmup; i < o.n; i++ {
		for j := range k {
			r := res[((i+j)%k+k)%k] // rotate the order by one per iteration
			if err := settleAll(ctx, res); err != nil {
				return err
			}
			time.Sleep(o.gap) // let the engine's tail work after a start or removal end
			rec := newSteps()
			t0 := rec.last
			err := r.sc.job(ctx, rec)
			d := time.Since(t0)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				r.fail(err)
				continue
			}
			if i >= 0 {
				r.lat = append(r.lat, d)
				r.addSteps(rec)
			}
		}
		if i >= 0 && (i+1)%10 == 0 {
			fmt.Printf("  %d/%d\n", i+1, o.n)
		}
	}
	return nil
}

func throughputPhase(ctx context.Context, res []*result, o options) error {
	for rd := range o.rounds {
		order := slices.Clone(res)
		if rd%2 == 1 {
			slices.Reverse(order)
		}
		var line []string
		for _, r := range order {
			if err := settleAll(ctx, res); err != nil {
				return err
			}
			got, lat, err := saturate(ctx, r, o)
			if err != nil {
				return err
			}
			if r.sc.settle != nil { // how long the background work lasts after the load
				t := time.Now()
				if err := r.sc.settle(ctx); err != nil {
					return err
				}
				got.DrainS = time.Since(t).Seconds()
				if got.WindowS > 0 {
					got.JobsPerSDrained = got.JobsPerS * got.WindowS / (got.WindowS + got.DrainS)
				}
			}
			got.WindowS, got.JobsPerS = finite(got.WindowS), finite(got.JobsPerS)
			got.DrainS, got.JobsPerSDrained = finite(got.DrainS), finite(got.JobsPerSDrained)
			r.rounds = append(r.rounds, got)
			r.satLat = append(r.satLat, lat...)
			line = append(line, fmt.Sprintf("%s %.1f/s", r.sc.name, got.JobsPerS))
		}
		fmt.Printf("  round %d: %s\n", rd+1, strings.Join(line, ", "))
	}
	return nil
}

// saturate keeps o.parallel jobs in flight until at least o.jobs jobs were
// started and o.minDur passed.
func saturate(ctx context.Context, r *result, o options) (round, []time.Duration, error) {
	var (
		started atomic.Int64
		mu      sync.Mutex
		done    []time.Time
		lat     []time.Duration
		errs    int
		wg      sync.WaitGroup
	)
	t0 := time.Now()
	for range o.parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if n := started.Add(1); n > int64(o.jobs) && time.Since(t0) >= o.minDur {
					return
				}
				rec := newSteps()
				begin := rec.last
				err := r.sc.job(ctx, rec)
				now := time.Now()
				mu.Lock()
				if err != nil {
					errs++
					r.fail(err)
				} else {
					done = append(done, now)
					lat = append(lat, now.Sub(begin))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return round{}, nil, ctx.Err()
	}
	sort.Slice(done, func(i, j int) bool { return done[i].Before(done[j]) })
	rd := round{Jobs: len(done), Errors: errs}
	skip := o.parallel // start-up: the first completions
	switch {
	case len(done) > skip+1:
		w := done[len(done)-1].Sub(done[skip-1])
		rd.WindowS, rd.JobsPerS = w.Seconds(), float64(len(done)-skip)/w.Seconds()
	case len(done) > 0:
		w := done[len(done)-1].Sub(t0)
		rd.WindowS, rd.JobsPerS = w.Seconds(), float64(len(done))/w.Seconds()
	}
	return rd, lat, nil
}

func kernelRelease() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
