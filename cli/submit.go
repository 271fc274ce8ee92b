package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/telemetry"
)

type submitFlags struct {
	file, id, image, queue, workdir, heal, output, volume, spanFile string
	env, labels, grants                                             []string
	memoryMB, pids                                                  int64
	cpus                                                            float64
	wait, allowInstall                                              bool
	timeout, jobTimeout, waitTimeout                                time.Duration
	delay                                                           delayFlags // delay.go
	io                                                              submitIO   // io.go
	submitOpts                                                      []client.SubmitOption
}

func submitCmd(g *globals) *cobra.Command {
	var f submitFlags
	cmd := &cobra.Command{
		Use:   "submit [flags] -- 'command'",
		Short: "Submit a job (or a batch from --file / stdin) and optionally wait for the results",
		Long: `submit publishes one job built from the flags and the command, or a batch of
JSON specs from --file, and prints each job's id; with --wait it waits for the
results and prints them instead.

` + exitCodesHelp,
		Example: `  paddock submit --wait -- 'echo hi'
  paddock submit --image paddock/sandbox:latest --memory-mb 256 --timeout 10s -- 'python3 -c "print(2**10)"'
  paddock submit --wait --file jobs.jsonl          # one JSON spec per line
  paddock submit --in 10m -- 'make nightly'        # delayed: starts in 10 minutes (or --at RFC3339)
  paddock submit --wait --grant github-read -- 'curl -s --unix-socket /.paddock/broker.sock http://github-read/repos/x/y'
  paddock submit --follow --keep-output --in-file data.csv:in/data.csv --artifact 'out/**' -- 'python3 run.py'
  cat jobs.jsonl | paddock submit --file - --wait --output json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			specs, err := f.specs(cmd, args)
			if err != nil {
				return err
			}
			if f.submitOpts, err = f.delay.options(time.Now()); err != nil {
				return err
			}
			return submitAndWait(cmd.Context(), g, &f, specs)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.file, "file", "f", "", "JSONL file of job specs, one per line ('-' for stdin)")
	fs.StringVar(&f.id, "id", "", "job id (default: generated); a duplicate id runs once")
	fs.StringVar(&f.image, "image", "", "sandbox image (default: the operator's default)")
	fs.StringVar(&f.queue, "queue", "", "queue (default: \"default\")")
	fs.StringVar(&f.workdir, "workdir", "", "working directory (default /workspace)")
	fs.StringVar(&f.heal, "heal", "", "self-healing: off, rules, llm (default: the worker's)")
	fs.BoolVar(&f.allowInstall, "allow-install", false, "let the healer install a missing tool (the operator must allow installs)")
	fs.StringVar(&f.volume, "volume", "", "shared volume NAME or NAME:ro, mounted at /workspace (rw takes the volume's lock)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment variable NAME=value for the job (repeatable)")
	fs.StringArrayVarP(&f.labels, "label", "l", nil, "label key=value (repeatable)")
	fs.StringArrayVar(&f.grants, "grant", nil, "secrets broker grant the job may use through /.paddock/broker.sock (repeatable; docs/broker.md)")
	fs.Int64Var(&f.memoryMB, "memory-mb", 0, "memory limit in MiB")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit")
	fs.Int64Var(&f.pids, "pids", 0, "process limit")
	fs.Var(newSecondsValue(&f.timeout, 0), "timeout", "per-command timeout, whole seconds (e.g. 30s, 2m; a bare number is seconds)")
	fs.Var(newSecondsValue(&f.jobTimeout, 0), "job-timeout", "whole-job timeout, whole seconds (e.g. 10m; a bare number is seconds)")
	scopeEnv(fs, "timeout") // PADDOCK_SUBMIT_TIMEOUT: cancel --timeout is another thing
	fs.BoolVarP(&f.wait, "wait", "w", false, "wait for the results and print them")
	fs.DurationVar(&f.waitTimeout, "wait-timeout", 0, "give up waiting after this long (default: no limit)")
	addOutputFlag(cmd, &f.output)
	f.delay.register(fs)
	f.io.register(fs)
	fs.StringVar(&f.spanFile, "span-file", "", "record the submit spans in this `file` (default: the span file of 'paddock up', when it exists)")
	registerCompletion(cmd, "heal", fixedCompletion(healModes...))
	registerCompletion(cmd, "image", envListCompletion("PADDOCK_IMAGES", defaultImages))
	registerCompletion(cmd, "queue", envListCompletion("PADDOCK_QUEUES", defaultQueues))
	return cmd
}

// specs builds the job specs from the flags and either the command line or
// a JSONL batch.
func (f *submitFlags) specs(cmd *cobra.Command, args []string) ([]job.Spec, error) {
	if f.file != "" {
		if len(args) > 0 {
			return nil, errors.New("give either --file or a command, not both")
		}
		if f.io.set() {
			return nil, errors.New("--follow, --keep-output, --in-file, --artifact and --stdin are for a command given on the line; " +
				"a --file spec says \"output\", \"files\", \"artifacts\" and \"stdin\" itself")
		}
		var r io.Reader = os.Stdin
		if f.file != "-" {
			fh, err := os.Open(f.file)
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			r = fh
		}
		return job.ReadBatch(r, f.file)
	}
	if len(args) == 0 {
		return nil, errors.New("no command: paddock submit [flags] -- 'command' (or --file jobs.jsonl)")
	}
	s := job.Spec{ID: f.id, Command: strings.Join(args, " "), Image: f.image, Queue: f.queue, Workdir: f.workdir, Grants: f.grants}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--env %q: want NAME=value", kv)
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = v
	}
	for _, kv := range f.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q: want key=value", kv)
		}
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
	fl := cmd.Flags()
	if fl.Changed("memory-mb") {
		s.Limits.MemoryMB = &f.memoryMB
	}
	if fl.Changed("cpus") {
		s.Limits.CPUs = &f.cpus
	}
	if fl.Changed("pids") {
		s.Limits.Pids = &f.pids
	}
	if fl.Changed("timeout") {
		n, err := wholeSeconds("timeout", f.timeout)
		if err != nil {
			return nil, err
		}
		s.Limits.CommandTimeoutS = &n
	}
	if fl.Changed("job-timeout") {
		n, err := wholeSeconds("job-timeout", f.jobTimeout)
		if err != nil {
			return nil, err
		}
		s.Limits.JobTimeoutS = &n
	}
	if f.volume != "" {
		name, mode, _ := strings.Cut(f.volume, ":")
		s.Volume = &job.Volume{Name: name, Mode: job.VolumeMode(mode)}
	}
	if f.heal != "" || f.allowInstall {
		s.Heal = &job.HealPolicy{Mode: job.HealMode(f.heal), AllowInstall: f.allowInstall}
	}
	if err := f.io.apply(&s); err != nil {
		return nil, err
	}
	return []job.Spec{s}, nil
}

func submitAndWait(ctx context.Context, g *globals, f *submitFlags, specs []job.Spec) error {
	nc, tn, err := g.connectClient(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg := client.Config{Logger: g.logger, Tenant: tn}
	stopTracing := f.tracing(ctx, g, &cfg)
	defer stopTracing()
	c, err := client.New(nc, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	if len(f.io.inFiles) > 0 {
		if err := f.io.attach(ctx, c, &specs[0], g.stderr); err != nil {
			return err
		}
	}

	prog := newProgress(g.stderr, "submitted", len(specs))
	subs, err := c.SubmitBatch(ctx, specs, prog.update, f.submitOpts...)
	prog.done()
	var ids []string
	var out []submitted
	for i, s := range subs {
		if s.Err != nil {
			fmt.Fprintf(g.stderr, "job %d: not submitted: %v\n", i+1, s.Err)
			continue
		}
		ids = append(ids, s.ID)
		out = append(out, submitted{ID: s.ID, Duplicate: s.Duplicate})
	}
	switch {
	case len(ids) == 0 && err == nil:
		return errors.New("no job was submitted")
	case len(ids) == 0:
		return err
	case f.io.follow:
		if ferr := followJob(ctx, g, f, c, ids[0]); ferr != nil {
			return ferr
		}
	case !f.wait:
		if perr := printSubmitted(g.stdout, out, f.output); perr != nil {
			return perr
		}
	default:
		if werr := waitAndPrint(ctx, g, f, c, ids); werr != nil {
			return werr
		}
	}
	if err != nil {
		return &exitCodeError{exitFailure} // some jobs were not submitted (printed above)
	}
	return nil
}

// tracing records the submit spans in --span-file, by default the span
// file of `paddock up` when there is one; the function it returns flushes
// them.
func (f *submitFlags) tracing(ctx context.Context, g *globals, cfg *client.Config) func() {
	if f.spanFile == "" {
		if p := filepath.Join(g.dataDirPath(), "spans.jsonl"); fileExists(p) {
			f.spanFile = p
		}
	}
	if f.spanFile == "" {
		return func() {}
	}
	p, err := telemetry.Setup(ctx, g.telemetryConfig("paddock-cli", f.spanFile, false))
	if err != nil {
		return func() {}
	}
	cfg.Tracer = p.TracerProvider().Tracer(client.TracerName)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(sctx)
	}
}

// waitAndPrint waits for the results of ids (at most --wait-timeout),
// prints them, and returns exit status 2 when a job did not succeed.
func waitAndPrint(ctx context.Context, g *globals, f *submitFlags, c *client.Client, ids []string) error {
	if f.waitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.waitTimeout)
		defer cancel()
	}
	prog := newProgress(g.stderr, "finished", len(ids))
	results, werr := c.WaitAll(ctx, ids, prog.update)
	prog.done()
	if perr := printResults(g.stdout, results, f.output); perr != nil {
		return perr
	}
	if werr != nil {
		return fmt.Errorf("waiting for results: %w (the jobs keep running; `paddock wait ID` resumes)", werr)
	}
	return jobsExit(results)
}

// submitted is one line of submit's output without --wait.
type submitted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

func printSubmitted(w io.Writer, subs []submitted, output string) error {
	if output == "json" {
		return printJSONL(w, subs)
	}
	for _, s := range subs {
		dup := ""
		if s.Duplicate {
			dup = " (duplicate: runs once)"
		}
		if _, err := fmt.Fprintf(w, "%s%s\n", s.ID, dup); err != nil {
			return err
		}
	}
	return nil
}

// printResults prints results as JSON lines, one result in full, or a
// table of several.
func printResults(w io.Writer, results []job.Result, output string) error {
	switch {
	case output == "json":
		return printJSONL(w, results)
	case len(results) == 1:
		printResult(w, results[0])
	default:
		printTable(w, results)
	}
	return nil
}

// jobsExit is exit status 2 (exitJobs) when a job did not succeed.
func jobsExit(results []job.Result) error {
	for _, r := range results {
		if r.State != job.StateSucceeded {
			return &exitCodeError{exitJobs}
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func getCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Print a job's result, if it has finished",
		Long: `get prints a job's result if it has one (1 if it has none yet).

` + exitCodesHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showResults(cmd.Context(), g, args, output, false)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func waitCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "wait ID...",
		Short: "Wait for jobs to finish and print their results (works before and after they end)",
		Long: `wait waits until every job has a result, then prints them.

` + exitCodesHelp,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return showResults(cmd.Context(), g, args, output, true)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func showResults(ctx context.Context, g *globals, ids []string, output string, wait bool) error {
	nc, tn, err := g.connectClient(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{Logger: g.logger, Tenant: tn})
	if err != nil {
		return err
	}
	defer c.Close()
	var results []job.Result
	if wait {
		results, err = c.WaitAll(ctx, ids, nil)
	} else {
		var r job.Result
		r, err = c.Get(ctx, ids[0])
		if errors.Is(err, client.ErrNotFinished) {
			return fmt.Errorf("job %s has no result yet (still queued or running, or unknown): `paddock wait %s` waits for it", ids[0], ids[0])
		}
		results = []job.Result{r}
	}
	if err != nil {
		return err
	}
	if err := printResults(g.stdout, results, output); err != nil {
		return err
	}
	return jobsExit(results)
}
