package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	dockerclient "github.com/moby/moby/client"
	"github.com/spf13/pflag"
)

// benchEnv must be "1" for a worker to start with --noop-executor.
const benchEnv = "PADDOCK_BENCH"

// errNoopNotBench refuses --noop-executor outside a benchmark.
var errNoopNotBench = errors.New("--noop-executor runs no command at all (every job \"succeeds\" with empty output) and is for benchmarks only; " +
	"remove it, or set " + benchEnv + "=1 in the environment of a bench run")

// benchFlags are the services' hidden, bench-only flags (make bench); they
// do not appear in --help.
type benchFlags struct {
	cpuProfile   string
	noopExecutor bool // worker only
}

// register adds --cpu-profile, and --noop-executor for a worker, to fs,
// hidden.
func (b *benchFlags) register(fs *pflag.FlagSet, worker bool) {
	fs.StringVar(&b.cpuProfile, "cpu-profile", "", "bench only: write a CPU profile (pprof) of the whole process to `file` when it stops")
	_ = fs.MarkHidden("cpu-profile")
	if worker {
		fs.BoolVar(&b.noopExecutor, "noop-executor", false, "bench only, needs "+benchEnv+"=1: start no sandbox runtime; every command ends at once with exit 0 and empty output")
		_ = fs.MarkHidden("noop-executor")
	}
}

// check refuses --noop-executor unless PADDOCK_BENCH=1.
func (b *benchFlags) check() error {
	if b.noopExecutor && os.Getenv(benchEnv) != "1" {
		return errNoopNotBench
	}
	return nil
}

// checkWorkerStart is checkStart for a worker, with its bench flags.
func checkWorkerStart(g *globals, cf *capsFlags, sf *schedFlags, wf *workerFlags) error {
	return errors.Join(wf.bench.check(), checkStart(g, cf, sf, wf))
}

// startProfile starts the CPU profile --cpu-profile asks for; stop ends it
// and writes the file.
func (b *benchFlags) startProfile() (stop func(), err error) {
	if b.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.cpuProfile)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// docker connects to the Docker engine, unless the worker runs the no-op
// executor (nil client, nothing to close).
func (b *benchFlags) docker(ctx context.Context) (*dockerclient.Client, func(), error) {
	if b.noopExecutor {
		return nil, func() {}, nil
	}
	d, err := connectDocker(ctx)
	if err != nil {
		return nil, nil, err
	}
	return d, func() { d.Close() }, nil
}
