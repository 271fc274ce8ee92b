package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/telemetry"
)

// newRoot builds the command tree without running it.
func newRoot(t *testing.T) *cobra.Command {
	t.Helper()
	return newRootCmd(&globals{stdout: io.Discard, stderr: io.Discard})
}

// testCmd is a command with a plain, a scoped and an int64 flag, whose
// RunE records what bindEnv left.
func testCmd(t *testing.T) (*cobra.Command, *int64, *time.Duration) {
	var mem int64
	var timeout time.Duration
	cmd := &cobra.Command{Use: "submit", RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.Flags().Int64Var(&mem, "memory-mb", 0, "")
	cmd.Flags().Var(newSecondsValue(&timeout, 0), "timeout", "")
	scopeEnv(cmd.Flags(), "timeout")
	cmd.SetArgs(nil)
	return cmd, &mem, &timeout
}

// The bug: PADDOCK_MEMORY_MB was parsed but left Changed false, so submit
// (which reads limits only when Changed) ignored it.
func TestBindEnvCountsAsSet(t *testing.T) {
	t.Setenv("PADDOCK_MEMORY_MB", "256")
	t.Setenv("PADDOCK_TIMEOUT", "5")         // unscoped: not for a scoped flag
	t.Setenv("PADDOCK_SUBMIT_TIMEOUT", "10") // a bare number is seconds
	cmd, mem, timeout := testCmd(t)
	require.NoError(t, cmd.ParseFlags(nil))
	require.NoError(t, bindEnv(cmd))
	assert.True(t, cmd.Flags().Changed("memory-mb"), "a value from the environment counts as set")
	assert.Equal(t, int64(256), *mem)
	assert.True(t, cmd.Flags().Changed("timeout"))
	assert.Equal(t, 10*time.Second, *timeout, "PADDOCK_SUBMIT_TIMEOUT, not PADDOCK_TIMEOUT")

	t.Run("the command line wins", func(t *testing.T) {
		cmd, mem, _ := testCmd(t)
		require.NoError(t, cmd.ParseFlags([]string{"--memory-mb", "512"}))
		require.NoError(t, bindEnv(cmd))
		assert.Equal(t, int64(512), *mem)
	})
	t.Run("unset stays unset", func(t *testing.T) {
		os.Unsetenv("PADDOCK_MEMORY_MB") // t.Setenv above restores it
		cmd, _, _ := testCmd(t)
		require.NoError(t, cmd.ParseFlags(nil))
		require.NoError(t, bindEnv(cmd))
		assert.False(t, cmd.Flags().Changed("memory-mb"))
	})
	t.Run("a bad value names the variable", func(t *testing.T) {
		t.Setenv("PADDOCK_MEMORY_MB", "lots")
		t.Setenv("PADDOCK_SUBMIT_TIMEOUT", "soon")
		cmd, _, _ := testCmd(t)
		require.NoError(t, cmd.ParseFlags(nil))
		err := bindEnv(cmd)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `PADDOCK_MEMORY_MB="lots"`)
		assert.Contains(t, err.Error(), `PADDOCK_SUBMIT_TIMEOUT="soon"`)
	})
}

func TestSecondsValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"10": 10 * time.Second, "0": 0, "1m30s": 90 * time.Second, "1500ms": 1500 * time.Millisecond, "-2": -2 * time.Second} {
		var d time.Duration
		require.NoError(t, newSecondsValue(&d, time.Hour).Set(in), in)
		assert.Equal(t, want, d, in)
	}
	for _, in := range []string{"", "ten", "10x", "99999999999999999999"} {
		var d time.Duration
		assert.Error(t, newSecondsValue(&d, 0).Set(in), in)
	}
	n, err := wholeSeconds("timeout", 2*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, int64(120), n)
	_, err = wholeSeconds("timeout", 1500*time.Millisecond)
	assert.ErrorContains(t, err, "--timeout 1.5s: a job limit is whole seconds")
}

// A flag name that has different types on different commands must be
// command-scoped, or one PADDOCK_<FLAG> would be parsed as both (as
// PADDOCK_TIMEOUT was: seconds for submit, a duration for cancel). And
// every flag that is scoped somewhere is scoped everywhere it appears.
func TestEnvScopedWhereFlagsDiffer(t *testing.T) {
	type use struct {
		cmd, typ string
		scoped   bool
	}
	byName := map[string][]use{}
	for _, c := range newRoot(t).Commands() {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			_, scoped := f.Annotations[annotEnvScoped]
			byName[f.Name] = append(byName[f.Name], use{c.Name(), f.Value.Type(), scoped})
		})
	}
	for name, uses := range byName {
		anyScoped, typesDiffer := false, false
		for _, u := range uses {
			anyScoped = anyScoped || u.scoped
			typesDiffer = typesDiffer || u.typ != uses[0].typ
		}
		if !typesDiffer && !anyScoped {
			continue
		}
		for _, u := range uses {
			assert.True(t, u.scoped, "--%s on %s (%s) must be command-scoped: %v", name, u.cmd, u.typ, uses)
		}
	}
	require.Contains(t, byName, "timeout")
	for _, u := range byName["timeout"] {
		assert.Equal(t, "duration", u.typ, "--timeout of %s", u.cmd)
	}
}

// startFleetServices starts NATS with Paddock's streams and a Redis, and
// returns the global flags that point at them.
func startFleetServices(t *testing.T) (*testsvc.NATS, *testsvc.Redis, jetstream.JetStream, []string) {
	t.Helper()
	ns := testsvc.StartNATS(t)
	rs := testsvc.StartRedis(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(context.Background(), js, results.StreamConfig{}))
	return ns, rs, js, []string{"--nats-url", ns.URL, "--redis-url", "unix://" + rs.Addr}
}

// PADDOCK_MEMORY_MB=256 paddock submit … submits a job with memory_mb 256.
func TestSubmitTakesLimitsFromTheEnvironment(t *testing.T) {
	_, _, js, flags := startFleetServices(t)
	t.Setenv("PADDOCK_MEMORY_MB", "256")
	t.Setenv("PADDOCK_SUBMIT_TIMEOUT", "10")
	t.Setenv("PADDOCK_JOB_TIMEOUT", "2m")
	t.Setenv("PADDOCK_TIMEOUT", "99s") // not submit's: cancel's is PADDOCK_CANCEL_TIMEOUT
	id := testsvc.Unique("env")
	code, stdout, _ := runCLIOut(t, append([]string{"submit", "--id", id, "-o", "json"}, append(flags, "--", "echo hi")...)...)
	require.Equal(t, exitOK, code)

	var line struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&line), "submit -o json prints JSON")
	assert.Equal(t, id, line.ID)
	assert.False(t, line.Duplicate)

	st, err := js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
	require.NoError(t, err)
	msg, err := st.GetLastMsgForSubject(context.Background(), job.SubmitSubject(job.DefaultTenant))
	require.NoError(t, err)
	spec, err := job.Decode(msg.Data)
	require.NoError(t, err)
	assert.Equal(t, id, spec.ID)
	require.NotNil(t, spec.Limits.MemoryMB, "PADDOCK_MEMORY_MB was ignored")
	assert.Equal(t, int64(256), *spec.Limits.MemoryMB)
	require.NotNil(t, spec.Limits.CommandTimeoutS)
	assert.Equal(t, int64(10), *spec.Limits.CommandTimeoutS)
	require.NotNil(t, spec.Limits.JobTimeoutS)
	assert.Equal(t, int64(120), *spec.Limits.JobTimeoutS)

	t.Run("a limit that is not whole seconds", func(t *testing.T) {
		code, _, stderr := runCLIOut(t, append([]string{"submit", "--timeout", "1500ms"}, append(flags, "--", "echo hi")...)...)
		assert.Equal(t, exitFailure, code)
		assert.Contains(t, stderr, "--timeout 1.5s: a job limit is whole seconds")
	})
	t.Run("table output", func(t *testing.T) {
		id := testsvc.Unique("env")
		code, stdout, _ := runCLIOut(t, append([]string{"submit", "--id", id}, append(flags, "--", "echo hi")...)...)
		require.Equal(t, exitOK, code)
		assert.Equal(t, id+"\n", stdout)
	})
}

// record stores a result the way a worker does and returns its id.
func record(t *testing.T, rs *testsvc.Redis, js jetstream.JetStream, reason job.Reason) string {
	t.Helper()
	rdb := rs.Client()
	t.Cleanup(func() { rdb.Close() })
	id := testsvc.Unique(string(reason))
	_, _, err := results.NewStore(rdb, js, results.StoreConfig{}).Record(context.Background(), job.Result{ID: id, Reason: reason})
	require.NoError(t, err)
	return id
}

// get and wait exit 2 when a job did not succeed, like submit --wait.
func TestGetAndWaitExitCodes(t *testing.T) {
	_, rs, js, flags := startFleetServices(t)
	ok := record(t, rs, js, job.ReasonOK)
	failed := record(t, rs, js, job.ReasonExitNonzero)

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"get", ok}, exitOK},
		{[]string{"get", failed}, exitJobs},
		{[]string{"wait", ok}, exitOK},
		{[]string{"wait", failed}, exitJobs},
		{[]string{"wait", ok, failed}, exitJobs},
		{[]string{"get", "-o", "json", failed}, exitJobs},
		{[]string{"get", "no-such-job"}, exitFailure},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, _ := runCLIOut(t, append(tc.args, flags...)...)
			assert.Equal(t, tc.code, code)
			if tc.code == exitJobs {
				assert.Contains(t, stdout, failed, "the results are printed before the exit")
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, stdout, _ := runCLIOut(t, append([]string{"wait", "-o", "json", ok, failed}, flags...)...)
		assert.Equal(t, exitJobs, code)
		var got []job.Result
		dec := json.NewDecoder(strings.NewReader(stdout))
		for dec.More() {
			var r job.Result
			require.NoError(t, dec.Decode(&r))
			got = append(got, r)
		}
		require.Len(t, got, 2)
		assert.Equal(t, job.StateSucceeded, got[0].State)
		assert.Equal(t, job.StateFailed, got[1].State)
	})
}

// Every command that prints something has -o json|table, and --help
// documents the exit codes.
func TestOutputFlagsAndExitCodeHelp(t *testing.T) {
	root := newRoot(t)
	for _, name := range []string{"submit", "get", "wait", "cancel", "trace", "version"} {
		c, _, err := root.Find([]string{name})
		require.NoError(t, err)
		f := c.Flags().Lookup("output")
		if assert.NotNil(t, f, "%s has no --output", name) {
			assert.Equal(t, "o", f.Shorthand, name)
			assert.Equal(t, "table", f.DefValue, name)
			assert.ErrorContains(t, f.Value.Set("yaml"), "want table or json", name)
		}
	}
	for _, name := range []string{"submit", "get", "wait"} {
		code, stdout, _ := runCLIOut(t, name, "--help")
		require.Equal(t, exitOK, code)
		assert.Contains(t, stdout, "Exit status: 0 ok; 1 error", name)
		assert.Contains(t, stdout, "2 a job did\nnot succeed", name)
	}
	code, _, stderr := runCLIOut(t, "get", "-o", "yaml", "x")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "want table or json")
}

// A backquoted word in a flag's usage becomes its value name in --help:
// "`paddock up`" made it read "--span-file paddock up".
func TestHelpValueNames(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			assert.NotContains(t, name, " ", "%s --%s shows as --%s %s", c.CommandPath(), f.Name, f.Name, name)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(t))
	code, stdout, _ := runCLIOut(t, "submit", "--help")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stdout, "--span-file file ")
	assert.NotContains(t, stdout, "--span-file paddock")
}

// cancel -o json prints each reply, or the error, as JSON; the exit
// status is 1 when a cancel could not be carried out.
func TestCancelJSON(t *testing.T) {
	_, _, _, flags := startFleetServices(t)
	t.Setenv("PADDOCK_CANCEL_TIMEOUT", "2") // a bare number is seconds, as for submit
	t.Setenv("PADDOCK_TIMEOUT", "1h")       // not cancel's: submit's is PADDOCK_SUBMIT_TIMEOUT
	// No deadline on ctx, as in main, so that the --timeout applies; a
	// wrong one is cut short at 30 s.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-time.After(30 * time.Second):
			cancel()
		case <-ctx.Done():
		}
	}()
	var stdout, stderr syncBuffer
	t0 := time.Now()
	code := Run(ctx, append([]string{"cancel", "-o", "json", "some-job"}, flags...), &stdout, &stderr)
	took := time.Since(t0)
	t.Logf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", code, took, stdout.String(), stderr.String())
	assert.Equal(t, exitFailure, code, "no scheduler answers cancel requests")
	assert.Contains(t, stderr.String(), "some-job: not canceled")
	assert.True(t, took >= 2*time.Second && took < 20*time.Second, "PADDOCK_CANCEL_TIMEOUT=2 is 2s; took %s", took)
	var r job.CancelReply
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &r), stdout.String())
	assert.Equal(t, "some-job", r.ID)
	assert.NotEmpty(t, r.Error)
}

func TestTraceJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	now := time.Now().UTC().Truncate(time.Millisecond)
	want := telemetry.SpanRecord{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Name: "send paddock.jobs.submit",
		Kind: "producer", Start: now, End: now.Add(time.Millisecond), DurationMS: 1, Status: "unset",
		Attributes: map[string]any{"paddock.job.id": "j-1"}, Service: "paddock-cli"}
	line, err := json.Marshal(want)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, append(line, '\n'), 0o600))

	code, stdout, _ := runCLIOut(t, "trace", "-o", "json", "--span-file", file, "j-1")
	require.Equal(t, exitOK, code)
	var got telemetry.SpanRecord
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	assert.Equal(t, want.TraceID, got.TraceID)
	assert.Equal(t, want.Name, got.Name)
	assert.Equal(t, "j-1", got.Attributes["paddock.job.id"])

	code, stdout, _ = runCLIOut(t, "trace", "--span-file", file, "j-1")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stdout, "trace "+want.TraceID)
}

func TestVersionFromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/paddockhq/paddock", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "7d45b7b"}, {Key: "vcs.modified", Value: "true"}}}
	v := versionFrom(bi, true)
	assert.Equal(t, buildVersion{Version: "(devel)", Revision: "7d45b7b", Modified: true, Go: "go1.26.0"}, v)
	assert.Equal(t, "7d45b7b+dirty", v.String())

	bi.Main.Version = "v1.2.3"
	bi.Settings = bi.Settings[:1]
	v = versionFrom(bi, true)
	assert.Equal(t, "v1.2.3", v.String())
	var buf bytes.Buffer
	require.NoError(t, printVersion(&buf, v, "table"))
	assert.Equal(t, "paddock v1.2.3 (revision 7d45b7b) go1.26.0\n", buf.String())

	assert.Equal(t, "(devel)", versionFrom(nil, false).String())
}

func TestVersionCommand(t *testing.T) {
	code, stdout, _ := runCLIOut(t, "version", "-o", "json")
	require.Equal(t, exitOK, code)
	var v buildVersion
	require.NoError(t, json.Unmarshal([]byte(stdout), &v))
	assert.Equal(t, readVersion(), v)
	code, stdout, _ = runCLIOut(t, "version")
	require.Equal(t, exitOK, code)
	assert.True(t, strings.HasPrefix(stdout, "paddock "+v.Version), stdout)
}

// A scheduler reports service.version (target_info on /metrics) and logs
// JSON with --log-format json.
func TestServiceVersionAndJSONLogs(t *testing.T) {
	_, _, js, flags := startFleetServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- Run(ctx, append([]string{"scheduler", "--log-format", "json", "--metrics-addr", addr}, flags...), &stdout, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, exitOK, code)
		case <-time.After(30 * time.Second):
			t.Error("the scheduler did not stop")
		}
		t.Logf("stderr:\n%s", stderr.String())
	})

	var metrics string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		return strings.Contains(metrics, "target_info")
	}, 30*time.Second, 50*time.Millisecond, "no /metrics with target_info")
	assert.Contains(t, metrics, fmt.Sprintf(`service_version=%q`, readVersion().String()))

	// A job's log lines carry its trace: a rejected submission, sent with
	// a W3C traceparent, is logged with that trace id.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	msg := nats.NewMsg(job.SubmitSubject(job.DefaultTenant))
	msg.Data = []byte(`{"id":"` + testsvc.Unique("rej") + `","command":"echo hi","limits":{"memory_mb":1}}`)
	msg.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	_, err = js.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
	var rejected map[string]any
	require.Eventually(t, func() bool {
		for l := range strings.SplitSeq(strings.TrimSpace(stderr.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "job rejected" {
				rejected = m
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no 'job rejected' log line")
	assert.Equal(t, traceID, rejected["trace_id"], "the job's log line carries its trace id: %v", rejected)
	assert.NotEmpty(t, rejected["span_id"])

	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		var m map[string]any
		assert.NoError(t, json.Unmarshal([]byte(l), &m), "not a JSON log line: %s", l)
	}
}

func TestLogFormatFromEnvIsChecked(t *testing.T) {
	t.Setenv("PADDOCK_LOG_FORMAT", "xml")
	code, _, stderr := runCLIOut(t, "get", "x")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, `PADDOCK_LOG_FORMAT="xml"`)
	assert.Contains(t, stderr, "want text or json")
}

func TestTraceHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := newLogger(&buf, "json", slog.LevelInfo).With("component", "test")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "with span")
	log.InfoContext(context.Background(), "without span")
	log.Info("no context")

	var lines []map[string]any
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		lines = append(lines, m)
	}
	require.Len(t, lines, 3)
	assert.Equal(t, sc.TraceID().String(), lines[0]["trace_id"])
	assert.Equal(t, sc.SpanID().String(), lines[0]["span_id"])
	assert.Equal(t, "test", lines[0]["component"], "With keeps the wrapper's attributes")
	for _, l := range lines[1:] {
		assert.NotContains(t, l, "trace_id")
		assert.NotContains(t, l, "span_id")
	}

	buf.Reset()
	newLogger(&buf, "text", slog.LevelInfo).WithGroup("g").InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "grouped")
	assert.Contains(t, buf.String(), "trace_id="+sc.TraceID().String())
}

// Shell completion of flag values.
func TestFlagValueCompletion(t *testing.T) {
	complete := func(args ...string) []string {
		t.Helper()
		code, stdout, _ := runCLIOut(t, append([]string{cobra.ShellCompRequestCmd}, args...)...)
		require.Equal(t, exitOK, code)
		var vals []string
		for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if !strings.HasPrefix(l, ":") {
				vals = append(vals, l)
			}
		}
		return vals
	}
	assert.Equal(t, []string{"table", "json"}, complete("submit", "--output", ""))
	assert.Equal(t, []string{"table", "json"}, complete("cancel", "-o", ""))
	assert.Equal(t, []string{"off", "rules", "llm"}, complete("submit", "--heal", ""))
	assert.Equal(t, defaultImages, complete("submit", "--image", ""))
	assert.Equal(t, defaultQueues, complete("submit", "--queue", ""))
	assert.Equal(t, []string{"text", "json"}, complete("get", "--log-format", ""))
	t.Setenv("PADDOCK_QUEUES", "fast, slow")
	t.Setenv("PADDOCK_IMAGES", "my/img:1")
	assert.Equal(t, []string{"fast", "slow"}, complete("submit", "--queue", ""))
	assert.Equal(t, []string{"my/img:1"}, complete("submit", "--image", ""))
}
