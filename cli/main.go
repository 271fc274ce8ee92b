// Package cli is the paddock command tree: the all-in-one dev stack (up),
// the scheduler, worker, gateway and broker services, and the pipeline CLI
// (submit, get, wait, …). cmd/paddock is a few lines over Run, as River's
// cmd/river is over rivercli, so that a Go program can build its own
// paddock binary (extra commands, its own signal handling) on this one.
//
// Configuration: flags, then PADDOCK_* environment variables (the flag name
// upper-cased with dashes as underscores, e.g. --nats-url ← PADDOCK_NATS_URL;
// PADDOCK_<COMMAND>_<FLAG> for a flag that means different things on
// different commands, e.g. PADDOCK_SUBMIT_TIMEOUT), then defaults (env.go).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/job"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a command failed (bad flags, unreachable service, …)
	exitJobs    = 2 // submit --wait, wait, get: at least one job did not succeed
)

// exitCodesHelp documents the exit codes in --help.
const exitCodesHelp = `Exit status: 0 ok; 1 error (bad flags, unreachable service, …); 2 a job did
not succeed (submit --wait or --follow, wait and get, after printing the results).`

type globals struct {
	natsURL   string
	redisURL  string
	dataDir   string
	auth      authFlags
	logLevel  string
	logFormat string
	logger    *slog.Logger
	replicas  int // --replicas of the commands that make streams and buckets (replicas.go)
	version   buildVersion
	stdout    io.Writer // results
	stderr    io.Writer // the log, errors and status lines
}

// Run runs the command line args (without the program name) until ctx ends
// and returns the process exit code: 0 ok, 1 an error, 2 a job that did not
// succeed. Results go to stdout, the log and errors to stderr.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, version: readVersion()}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)

	err := root.ExecuteContext(ctx)
	var ec *exitCodeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ec):
		return ec.code
	default:
		fmt.Fprintln(stderr, "paddock:", err)
		return exitFailure
	}
}

// newRootCmd builds the command tree on g.
func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "paddock",
		Short: "Run AI-agent shell commands in fresh, capped, network-less containers",
		Long: `Paddock runs batch jobs (a bash command, an image, limits) submitted over NATS
JetStream, each in a fresh, read-only, network-less Docker container that is
destroyed when the job ends. Start a dev stack with 'paddock up', then
'paddock submit --wait -- "echo hi"' in another shell ('submit --follow'
prints the job's output as it runs; 'logs', 'output' and 'artifacts' read
what a job printed and left; 'put' uploads input files).

Every flag can also be set as PADDOCK_<FLAG> (e.g. PADDOCK_NATS_URL), or as
PADDOCK_<COMMAND>_<FLAG> where a flag means different things on different
commands (PADDOCK_SUBMIT_TIMEOUT, PADDOCK_CANCEL_TIMEOUT); a flag given on
the command line wins.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if err := checkReplicas(cmd, g.replicas); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
			}
			g.logger = newLogger(g.stderr, g.logFormat, lvl) // logging.go
			// go-redis logs every failed dial; connection errors reach the
			// user through the returned errors instead.
			redis.SetLogger(redisLogger{g.logger})
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL (a comma-separated list; nats://user:password@…, tls://…); also $NATS_URL")
	pf.StringVar(&g.redisURL, "redis-url", "redis://127.0.0.1:6379", "Redis URL: redis://[user:password@]host:port/db, rediss://… (TLS), unix:///path, or a master behind Sentinels: redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/<db>][?sentinel_password=…] (also asynq's redis-sentinel://…?master=<name>); the user and password are the data nodes', sentinel_user/sentinel_password the Sentinels'")
	pf.StringVar(&g.dataDir, "data-dir", "", "`directory` of the local stack's state: 'paddock up' keeps NATS, Redis, volumes and credentials there, and client commands find the dev tenant's credentials there (default $XDG_STATE_HOME/paddock or ~/.local/state/paddock)")
	setEnvAliases(pf, "nats-url", "NATS_URL")
	g.auth.register(pf)
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.Var(newChoiceValue(&g.logFormat, "text", logFormats...), "log-format", "log format: text or json (with trace_id and span_id when a span is active)")
	registerCompletion(root, "log-level", fixedCompletion(logLevels...))
	registerCompletion(root, "log-format", fixedCompletion(logFormats...))

	root.AddCommand(upCmd(g), schedulerCmd(g), workerCmd(g), gatewayCmd(g), brokerCmd(g), mcpCmd(g), submitCmd(g), getCmd(g), waitCmd(g), cancelCmd(g), traceCmd(g),
		logsCmd(g), outputCmd(g), putCmd(g), artifactsCmd(g), tenantCmd(g), authCmd(g), fleetCmd(g), schemaCmd(), versionCmd())
	return root
}

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}

// exitCodeError ends the process with code after its output was printed.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func schemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:       "schema spec|result",
		Short:     "Print the JSON Schema of a job spec or result",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"spec", "result"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "spec":
				_, err := cmd.OutOrStdout().Write(job.SpecSchema)
				return err
			case "result":
				_, err := cmd.OutOrStdout().Write(job.ResultSchema)
				return err
			}
			return fmt.Errorf("schema %q: want spec or result", args[0])
		},
	}
}
