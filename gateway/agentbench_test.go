package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// The agent token economy (make bench-agent; docs/benchmarks.md, "Agent
// token economy"). A scripted agent, no LLM, solves a fixed set of tasks
// two ways on one real fleet:
//
//   - ours: the MCP bash tool over streamable HTTP (the official go-sdk
//     client). Answers are capped; when the agent needs more than a cut
//     answer shows, it pages the spill file the answer names with grep or
//     sed in its next call, as an agent reading the tool's description does.
//   - naive: a typical set of JSON tools (naiveTools) whose every call
//     returns everything: each call is the equivalent command run through
//     the same fleet with output.keep, its complete output read back with
//     client.Output and counted as returned to the context.
//
// Per task it records the characters the agent's context receives
// (answers) and sends (its calls' arguments), the round trips, and the
// tool definitions the context holds, and checks both answers against the
// one the data's generator implies: a wrong answer fails the bench.

// benchAgentEnv turns TestAgentBench on.
const benchAgentEnv = "PADDOCK_BENCH_AGENT"

// charsPerToken is the token estimate of the bench: 4 characters a token.
const charsPerToken = 4

// seedClaim is seed 000's range of token savings of bash pipelines over
// JSON tool schemas (61 % You.com, 98.7 % Anthropic), in percent.
var seedClaim = [2]float64{61, 98.7}

// benchOut is where the bench writes agent.json and agent.md, from the
// package's directory.
const benchOut = "../bench/out"

// The data's fixed points, which the setups and the wanted answers share.
const (
	csvRows       = 100_000
	treeFiles     = 2_000
	treeTarget    = 1337 // the one file that imports github.com/acme/auth
	buildLines    = 50_000
	buildErrLine  = 31_337
	buildError    = "src/net/parse_header.c:412:17: error: 'hdr_len' undeclared (first use in this function)"
	testCases     = 12_000
	testFailing   = 7_777
	bigFiles      = 3_000
	bigModulus    = 3_001 // prime: sizes (i*7919) % 3001 are 3,000 distinct values
	regionsInData = "north south east west central coast mountain"
)

// benchTask is one task: a setup that writes its data into the workspace
// (run both ways, not counted), and the agent's plan for each way. A plan
// returns the answer the agent read in the answers it got.
type benchTask struct {
	name, question string
	setup          string
	want           func() string
	ours, naive    func(a *agent) string
}

func benchTasks() []benchTask {
	return []benchTask{
		{name: "csv_sum", question: "total amount_cents per region of a 100,000-row CSV",
			setup: csvSetup, want: wantRegionSums,
			ours: func(a *agent) string {
				a.call("bash", map[string]any{"command": "head -n 5 /workspace/csv/sales.csv; wc -l /workspace/csv/sales.csv"})
				return regionSums(a.call("bash", map[string]any{"command": `awk -F, 'NR > 1 { s[$2] += $5 } END { for (k in s) printf "%s %.0f\n", k, s[k] }' /workspace/csv/sales.csv | sort`}))
			},
			naive: func(a *agent) string {
				return regionSums(a.call("read_file", map[string]any{"path": "/workspace/csv/sales.csv"}))
			}},
		{name: "find_import", question: "the one file of ~2,000 that imports github.com/acme/auth (v1)",
			setup: treeSetup, want: func() string { return treePath(treeTarget) },
			ours: func(a *agent) string {
				return a.seek("grep -rn 'acme/auth' /workspace/tree", importer,
					func(spill string) string { return `grep -F '"github.com/acme/auth"' ` + spill })
			},
			naive: func(a *agent) string {
				return importer(a.call("grep", map[string]any{"pattern": "acme/auth", "path": "/workspace/tree"}))
			}},
		{name: "build_error", question: "the compiler error in a failing build log of 50,000 lines",
			setup: buildSetup, want: func() string { return buildError },
			ours: func(a *agent) string {
				return a.seek("cat /workspace/build/build.log", compilerError,
					func(spill string) string { return "grep -n -m 3 ': error:' " + spill })
			},
			naive: func(a *agent) string {
				return compilerError(a.call("read_file", map[string]any{"path": "/workspace/build/build.log"}))
			}},
		{name: "failing_test", question: "the failing test and its message among 12,000 passing ones",
			setup: testsSetup, want: wantFailure,
			ours: func(a *agent) string {
				return a.seek("sh /workspace/tests/run.sh", failure,
					func(spill string) string { return "grep -B 1 -- '--- FAIL:' " + spill })
			},
			naive: func(a *agent) string {
				return failure(a.call("run_command", map[string]any{"command": "sh /workspace/tests/run.sh"}))
			}},
		{name: "largest_file", question: "the largest of 3,000 files in one directory, and its size",
			setup: bigSetup, want: wantLargest,
			ours: func(a *agent) string {
				return largest(a.call("bash", map[string]any{"command": "ls -l /workspace/big | sort -k5,5n | tail -n 3"}))
			},
			naive: func(a *agent) string {
				return largest(a.call("list_dir", map[string]any{"path": "/workspace/big"}))
			}},
	}
}

// TestAgentBench runs the agent token economy bench (PADDOCK_BENCH_AGENT=1,
// make bench-agent) and writes bench/out/agent.json and agent.md.
func TestAgentBench(t *testing.T) {
	if os.Getenv(benchAgentEnv) != "1" {
		t.Skipf("the agent token economy bench runs with %s=1 (make bench-agent)", benchAgentEnv)
	}
	f := newFleet(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs := connectMCP(ctx, t, f)
	defs := definitions(ctx, t, cs)

	nv := &naiveFleet{t: t, c: f.client("dev"), volume: testsvc.Unique("naive-bench")}
	ours := func(ctx context.Context, name string, args map[string]any) string {
		return callBash(ctx, t, cs, name, args)
	}
	naive := func(ctx context.Context, name string, args map[string]any) string {
		out, _ := nv.run(ctx, naiveCommand(t, name, args), 0)
		return out
	}
	var rows []taskResult
	for _, task := range benchTasks() {
		t.Logf("task %s: setting up", task.name)
		setup := map[string]any{"command": task.setup, "timeout_s": 120}
		require.Contains(t, callBash(ctx, t, cs, "bash", setup), "ready", "setup of %s (bash tool)", task.name)
		_, r := nv.run(ctx, task.setup, 120)
		require.Equal(t, job.ReasonOK, r.Reason, "setup of %s (naive workspace): %s", task.name, r.Error)

		row := taskResult{Name: task.name, Question: task.question, Want: task.want()}
		row.Ours = play(ctx, t, "bash", ours, task.ours, defs.Ours.Chars)
		row.Naive = play(ctx, t, "json_tools", naive, task.naive, defs.Naive.Chars)
		row.fill()
		rows = append(rows, row)
	}
	rep := newReport(defs, rows)
	md := rep.markdown()
	writeReport(t, rep, md)
	t.Log("\n" + md)

	for _, row := range rows {
		assert.Equal(t, row.Want, row.Ours.Answer, "%s: the bash tool's agent got a wrong answer", row.Name)
		assert.Equal(t, row.Want, row.Naive.Answer, "%s: the JSON tools' agent got a wrong answer", row.Name)
		assert.LessOrEqual(t, row.Ours.MaxAnswerChars, 10_000, "%s: a bash answer over the cap", row.Name)
		assert.Less(t, row.Ours.ContextTokens, row.Naive.ContextTokens, "%s: capped answers cost more context than full ones", row.Name)
	}
}

// connectMCP connects the official go-sdk client to f's gateway as the dev
// tenant; at cleanup, before the fleet stops, the session closes and its
// workspace is deleted.
func connectMCP(ctx context.Context, t *testing.T, f *fleet) *mcp.ClientSession {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "paddock-agentbench", Version: "v1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.URL + "/mcp", HTTPClient: authed(devToken)}, nil)
	require.NoError(t, err, "connect the MCP client to %s/mcp", f.URL)
	t.Cleanup(func() {
		_ = cs.Close()
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, f.gw.CloseSessions(cctx), "delete the bench session's workspace")
	})
	return cs
}

// callBash calls tool (bash) with args and returns the answer's text; a
// protocol error or an error answer fails the bench.
func callBash(ctx context.Context, t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err, "call %s %v", tool, args)
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	require.False(t, res.IsError, "bash %v answered an error:\n%s", args["command"], b.String())
	return b.String()
}

// agent is one way of solving one task: it makes the calls and counts
// what they cost the context.
type agent struct {
	ctx  context.Context
	t    *testing.T
	tool func(ctx context.Context, name string, args map[string]any) string
	side sideResult
}

// call makes one tool call and returns its answer, counting the call's
// JSON (what the model writes) and the answer (what it reads).
func (a *agent) call(name string, args map[string]any) string {
	a.t.Helper()
	sent, err := json.Marshal(map[string]any{"name": name, "arguments": args})
	require.NoError(a.t, err)
	text := a.tool(a.ctx, name, args)
	n := utf8.RuneCountInString(text)
	a.side.Calls++
	a.side.SentChars += utf8.RuneCount(sent)
	a.side.ReturnedChars += n
	a.side.MaxAnswerChars = max(a.side.MaxAnswerChars, n)
	a.side.Commands = append(a.side.Commands, string(sent))
	return text
}

// spillRE finds the stdout spill file a cut bash answer names.
var spillRE = regexp.MustCompile(`/workspace/\.paddock/out/[A-Za-z0-9._-]+\.stdout`)

// seek runs command with the bash tool and reads its answer with solve;
// when the answer was cut before what the agent looks for, it pages the
// spill file the answer names with page(spill) in a second call.
func (a *agent) seek(command string, solve func(string) string, page func(spill string) string) string {
	a.t.Helper()
	text := a.call("bash", map[string]any{"command": command})
	if ans := solve(text); ans != "" {
		return ans
	}
	spill := spillRE.FindString(text)
	if spill == "" {
		a.t.Errorf("bash %q: no answer in it and no spill file named:\n%s", command, text)
		return ""
	}
	return solve(a.call("bash", map[string]any{"command": page(spill)}))
}

// play runs plan one way (via tool) and returns what it cost.
func play(ctx context.Context, t *testing.T, way string, tool func(context.Context, string, map[string]any) string,
	plan func(*agent) string, defChars int) sideResult {
	a := &agent{ctx: ctx, t: t, tool: tool, side: sideResult{Way: way, DefChars: defChars}}
	start := time.Now()
	a.side.Answer = plan(a)
	a.side.WallMS = time.Since(start).Milliseconds()
	a.side.ContextChars = a.side.DefChars + a.side.SentChars + a.side.ReturnedChars
	a.side.ContextTokens = tokens(a.side.ContextChars)
	return a.side
}

func tokens(chars int) int { return (chars + charsPerToken - 1) / charsPerToken }

// naiveFleet runs the JSON tools' calls as jobs of the dev tenant in one
// workspace volume of its own, every output kept and read back whole.
type naiveFleet struct {
	t      *testing.T
	c      *client.Client
	volume string
}

// run runs command (timeoutS: 0 for the default) and returns its complete
// stdout followed by its stderr, as a tool that returns everything does.
func (n *naiveFleet) run(ctx context.Context, command string, timeoutS int64) (string, job.Result) {
	n.t.Helper()
	keep := true
	spec := job.Spec{ID: client.NewID(), Command: command, Heal: &job.HealPolicy{Mode: job.HealOff},
		Volume: &job.Volume{Name: n.volume, Mode: job.VolumeRW}, Output: &job.OutputPolicy{Keep: &keep}}
	if timeoutS > 0 {
		spec.Limits.CommandTimeoutS, spec.Limits.JobTimeoutS = &timeoutS, &timeoutS
	}
	_, err := n.c.Submit(ctx, spec)
	require.NoError(n.t, err, "submit %q", command)
	r, err := n.c.Wait(ctx, spec.ID)
	require.NoError(n.t, err, "wait for %q", command)
	require.Contains(n.t, []job.Reason{job.ReasonOK, job.ReasonExitNonzero}, r.Reason, "%q: %s %s", command, r.Reason, r.Error)
	require.NotNil(n.t, r.Kept, "%q: output not kept", command)
	return n.kept(ctx, r, "stdout", r.Kept.Stdout) + n.kept(ctx, r, "stderr", r.Kept.Stderr), r
}

// kept reads one kept stream of r whole ("" when the job printed nothing
// on it).
func (n *naiveFleet) kept(ctx context.Context, r job.Result, stream string, o job.Object) string {
	n.t.Helper()
	if o.Name == "" {
		require.Zero(n.t, o.Bytes, "%s of %s: %s", stream, r.ID, o.Note)
		return ""
	}
	rc, err := n.c.Output(ctx, r.ID, stream)
	require.NoError(n.t, err, "%s of %s", stream, r.ID)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(n.t, err, "%s of %s", stream, r.ID)
	require.Equal(n.t, o.Bytes, int64(len(b)), "%s of %s: the whole output", stream, r.ID)
	return string(b)
}

// naiveCommand is the command a JSON tool's call amounts to.
func naiveCommand(t *testing.T, name string, args map[string]any) string {
	t.Helper()
	arg := func(k string) string {
		v, ok := args[k].(string)
		require.True(t, ok, "%s: argument %s", name, k)
		return shellQuote(v)
	}
	switch name {
	case "read_file":
		return "cat -- " + arg("path")
	case "list_dir":
		return "ls -la -- " + arg("path")
	case "grep":
		return "grep -rn -- " + arg("pattern") + " " + arg("path")
	case "run_command":
		return args["command"].(string)
	}
	t.Fatalf("the naive plan calls %s, which naiveCommand does not implement", name)
	return ""
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// expand fills the @NAME@ placeholders of a setup script.
var expand = strings.NewReplacer(
	"@CSV_ROWS@", strconv.Itoa(csvRows), "@REGIONS@", regionsInData,
	"@TREE_FILES@", strconv.Itoa(treeFiles), "@TREE_TARGET@", strconv.Itoa(treeTarget),
	"@BUILD_LINES@", strconv.Itoa(buildLines-2), "@BUILD_ERR_LINE@", strconv.Itoa(buildErrLine), "@BUILD_ERROR@", buildError,
	"@TEST_CASES@", strconv.Itoa(testCases), "@TEST_FAILING@", strconv.Itoa(testFailing),
	"@BIG_FILES@", strconv.Itoa(bigFiles), "@BIG_MODULUS@", strconv.Itoa(bigModulus),
).Replace

// The setups: deterministic generators (busybox awk, no randomness), each
// ending with "ready". The wanted answers are computed from the same
// formulas in Go (want*), never read back from the box.
var (
	// An orders CSV: order_id,region,product,qty,amount_cents.
	csvSetup = expand(`set -e
mkdir -p /workspace/csv
cat > /workspace/gen_csv.awk <<'EOF'
BEGIN {
	n = split("@REGIONS@", R, " ")
	print "order_id,region,product,qty,amount_cents"
	for (i = 1; i <= @CSV_ROWS@; i++)
		printf "%d,%s,sku-%03d,%d,%d\n", i, R[(i + int(i / 13)) % n + 1], (i * 31) % 500, 1 + (i * 13) % 9, 100 + (i * 7919) % 99901
}
EOF
awk -f /workspace/gen_csv.awk > /workspace/csv/sales.csv
rm /workspace/gen_csv.awk
echo ready`)

	// 40 services of 50 Go files; they import acme/auth/v2, authz and
	// authcache and mention acme/auth in comments (so that grepping for
	// the module finds ~1,850 lines); one imports github.com/acme/auth.
	treeSetup = expand(`set -e
cat > /workspace/gen_tree.awk <<'EOF'
BEGIN {
	for (k = 0; k < @TREE_FILES@; k++) {
		s = int(k / 50); j = k % 50
		if (j == 0) system(sprintf("mkdir -p /workspace/tree/svc-%02d/internal", s))
		f = sprintf("/workspace/tree/svc-%02d/internal/file%03d.go", s, j)
		printf "package svc%02d\n\nimport (\n\t\"context\"\n\t\"fmt\"\n", s > f
		if (k == @TREE_TARGET@) print "\t\"github.com/acme/auth\"" > f
		else if (k % 3 == 0) print "\tauth \"github.com/acme/auth/v2\"" > f
		if (k % 5 == 1) print "\t\"github.com/acme/authz\"" > f
		if (k % 7 == 2) print "\t\"github.com/acme/authcache\"" > f
		print ")\n" > f
		if (k % 4 == 0) printf "// Handler%d checks acme/auth tokens before it serves.\n", k > f
		printf "func Handler%d(ctx context.Context) error { return fmt.Errorf(\"svc%02d: %d\") }\n", k, s, k > f
		close(f)
	}
}
EOF
awk -f /workspace/gen_tree.awk
rm /workspace/gen_tree.awk
echo ready`)

	// A make log: compile lines, a warning every 97 lines, objects named
	// error_table*, one compiler error, and make's failure at the end.
	buildSetup = expand(`set -e
mkdir -p /workspace/build
cat > /workspace/gen_build.awk <<'EOF'
BEGIN {
	for (i = 1; i <= @BUILD_LINES@; i++) {
		if (i == @BUILD_ERR_LINE@)
			print "@BUILD_ERROR@"
		else if (i % 97 == 0)
			printf "src/mod%03d/unit%05d.c:%d:5: warning: unused variable 'tmp%d' [-Wunused-variable]\n", i % 211, i, i % 500 + 1, i
		else if (i % 1000 == 0)
			printf "[%5d/@BUILD_LINES@] CC src/errors/error_table%03d.o\n", i, i / 1000
		else
			printf "[%5d/@BUILD_LINES@] CC src/mod%03d/unit%05d.o\n", i, i % 211, i
	}
	print "make[2]: *** [Makefile:88: src/net/parse_header.o] Error 1"
	print "make: *** [all] Error 2"
}
EOF
awk -f /workspace/gen_build.awk > /workspace/build/build.log
rm /workspace/gen_build.awk
echo ready`)

	// A test suite in go test -v's format: every case passes but one.
	testsSetup = expand(`set -e
mkdir -p /workspace/tests
cat > /workspace/tests/cases.awk <<'EOF'
BEGIN {
	for (i = 1; i <= @TEST_CASES@; i++) {
		printf "=== RUN   TestCase%05d\n", i
		if (i == @TEST_FAILING@) {
			printf "    cases_test.go:77: checksum mismatch: got 0x%04x, want 0x%04x\n", i - 1, i
			printf "--- FAIL: TestCase%05d (0.01s)\n", i
		} else
			printf "--- PASS: TestCase%05d (0.00s)\n", i
	}
	print "FAIL"
	printf "FAIL\tgithub.com/acme/shop/cases\t3.204s\n"
	exit 1
}
EOF
printf '#!/bin/sh\nexec awk -f /workspace/tests/cases.awk\n' > /workspace/tests/run.sh
echo ready`)

	// One directory of files of 3,000 distinct sizes.
	bigSetup = expand(`set -e
mkdir -p /workspace/big
cat > /workspace/gen_big.awk <<'EOF'
BEGIN {
	pad = "x"
	while (length(pad) < @BIG_MODULUS@) pad = pad pad
	for (i = 1; i <= @BIG_FILES@; i++) {
		f = sprintf("/workspace/big/asset-%04d.bin", i)
		printf "%s", substr(pad, 1, (i * 7919) % @BIG_MODULUS@) > f
		close(f)
	}
}
EOF
awk -f /workspace/gen_big.awk
rm /workspace/gen_big.awk
echo ready`)
)

// wantRegionSums is the csv task's answer, from the generator's formulas.
func wantRegionSums() string {
	regions := strings.Fields(regionsInData)
	sums := map[string]int64{}
	for i := int64(1); i <= csvRows; i++ {
		sums[regions[(i+i/13)%int64(len(regions))]] += 100 + (i*7919)%99901
	}
	return formatSums(sums)
}

func formatSums(sums map[string]int64) string {
	if len(sums) == 0 {
		return ""
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatInt(sums[k], 10)
	}
	return strings.Join(parts, " ")
}

// regionSums reads the per-region totals in an answer: "region total"
// lines (the bash agent's awk), or the raw CSV, which the agent reading it
// sums itself.
func regionSums(text string) string {
	sums := map[string]int64{}
	if i := strings.Index(text, "order_id,region,"); i >= 0 {
		for _, l := range strings.Split(text[i:], "\n")[1:] {
			if f := strings.Split(l, ","); len(f) == 5 {
				if v, err := strconv.ParseInt(f[4], 10, 64); err == nil {
					sums[f[1]] += v
				}
			}
		}
		return formatSums(sums)
	}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sums[f[0]] = v
			}
		}
	}
	return formatSums(sums)
}

// treePath is the path of the tree's file number k.
func treePath(k int) string {
	return fmt.Sprintf("/workspace/tree/svc-%02d/internal/file%03d.go", k/50, k%50)
}

// importer reads the file that imports github.com/acme/auth itself (not
// v2, authz or authcache) in grep lines "path:line:text" or "path:text".
func importer(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), `"github.com/acme/auth"`) {
			path, _, _ := strings.Cut(l, ":")
			return path
		}
	}
	return ""
}

// lineNo is grep -n's prefix of a line ("31337:" or, for context lines,
// "31336-").
var lineNo = regexp.MustCompile(`^\d+[:-]`)

// compilerError reads the compiler's error line in a log.
func compilerError(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, ": error: ") {
			return strings.TrimSpace(lineNo.ReplaceAllString(l, ""))
		}
	}
	return ""
}

var failLine = regexp.MustCompile(`^--- FAIL: (\S+)`)

// failure reads "TestName: message" of the failing test in go test -v
// output: the FAIL line and the message logged just before it.
func failure(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if m := failLine.FindStringSubmatch(lineNo.ReplaceAllString(l, "")); m != nil && i > 0 {
			return m[1] + ": " + strings.TrimSpace(lineNo.ReplaceAllString(lines[i-1], ""))
		}
	}
	return ""
}

func wantFailure() string {
	return fmt.Sprintf("TestCase%05d: cases_test.go:77: checksum mismatch: got 0x%04x, want 0x%04x", testFailing, testFailing-1, testFailing)
}

// largest reads the largest regular file in ls -l lines: "name size".
func largest(text string) string {
	best, size := "", int64(-1)
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || !strings.HasPrefix(f[0], "-") {
			continue
		}
		if n, err := strconv.ParseInt(f[4], 10, 64); err == nil && n > size {
			best, size = f[len(f)-1], n
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("%s %d", best, size)
}

func wantLargest() string {
	best, size := 0, -1
	for i := 1; i <= bigFiles; i++ {
		if s := (i * 7919) % bigModulus; s > size {
			best, size = i, s
		}
	}
	return fmt.Sprintf("asset-%04d.bin %d", best, size)
}

// naiveTools is the baseline's tool set, as an agent framework sends it
// with every request: a typical set of file and shell tools with JSON
// schemas (written for this bench in the style of common coding agents).
// Only read_file, list_dir, grep and run_command are called; write_file
// and edit_file are there because a coding agent's context holds them.
const naiveTools = `[
{"name": "read_file",
 "description": "Read the contents of a file from the local filesystem and return them as text. The path must be an absolute path, not a relative one. By default the whole file is returned; for a very large file you may pass offset and limit to read a range of lines, but when in doubt read the whole file so that you do not miss relevant context. Lines are returned exactly as they are in the file, without line numbers. This tool reads text files only: for a binary file it returns an error saying so. If the file does not exist, an error is returned; use list_dir to find the right path first. It is often better to read several files that may be useful at once, calling this tool once per file in the same turn, than to guess their contents.",
 "inputSchema": {"type": "object", "properties": {
   "path": {"type": "string", "description": "The absolute path of the file to read, e.g. /workspace/src/main.go."},
   "offset": {"type": "integer", "minimum": 1, "description": "The 1-based line number to start reading from. Omit it to start at the first line."},
   "limit": {"type": "integer", "minimum": 1, "description": "The maximum number of lines to read from offset. Omit it to read to the end of the file."},
   "encoding": {"type": "string", "enum": ["utf-8", "latin-1", "ascii"], "default": "utf-8", "description": "The text encoding of the file."}},
  "required": ["path"], "additionalProperties": false}},
{"name": "write_file",
 "description": "Write a file to the local filesystem, creating it if it does not exist and replacing its whole contents if it does. The path must be absolute; missing parent directories are created. Use this tool to create new files; to change part of an existing file prefer edit_file, which sends only the change. Always read a file before you overwrite it, so that you do not lose content you did not mean to change. Do not write secrets or credentials into files. The file is written as UTF-8 text with the line endings given in content. Returns the number of bytes written, or an error if the path is not writable.",
 "inputSchema": {"type": "object", "properties": {
   "path": {"type": "string", "description": "The absolute path of the file to write."},
   "content": {"type": "string", "description": "The complete new contents of the file."},
   "mode": {"type": "string", "pattern": "^0[0-7]{3}$", "default": "0644", "description": "The permission bits of a newly created file, in octal."}},
  "required": ["path", "content"], "additionalProperties": false}},
{"name": "edit_file",
 "description": "Make an exact string replacement in an existing file. The old_string must match the file's text exactly, including whitespace and indentation, and must be unique in the file unless replace_all is true; otherwise the edit fails and the file is left unchanged, and you should read the file again and retry with more surrounding context to make the match unique. Use this tool for small, targeted changes to existing files; use write_file only for new files or complete rewrites. Preserve the file's existing style. Returns a short diff of the change.",
 "inputSchema": {"type": "object", "properties": {
   "path": {"type": "string", "description": "The absolute path of the file to modify."},
   "old_string": {"type": "string", "description": "The exact text to replace."},
   "new_string": {"type": "string", "description": "The text to replace it with; it must differ from old_string."},
   "replace_all": {"type": "boolean", "default": false, "description": "Replace every occurrence of old_string instead of requiring it to be unique."}},
  "required": ["path", "old_string", "new_string"], "additionalProperties": false}},
{"name": "list_dir",
 "description": "List the contents of a directory on the local filesystem, one entry per line with its type, permissions, owner, size in bytes and modification time, like ls -la. The path must be absolute. Use this tool to explore the project's structure before reading files, or to find the files that a task is about. Set recursive to list the whole tree under the directory; hidden files are included. Prefer grep when you know what text you are looking for.",
 "inputSchema": {"type": "object", "properties": {
   "path": {"type": "string", "description": "The absolute path of the directory to list."},
   "recursive": {"type": "boolean", "default": false, "description": "List every file under the directory, not only its direct entries."},
   "ignore": {"type": "array", "items": {"type": "string"}, "description": "Glob patterns of entries to leave out, e.g. [\"node_modules\", \"*.log\"]."}},
  "required": ["path"], "additionalProperties": false}},
{"name": "grep",
 "description": "Search file contents with a regular expression, recursively under a directory, and return every matching line as path:line_number:text. The pattern uses extended regular expression syntax (for example \"log.*Error\" or \"function\\s+\\w+\"); escape literal braces and parentheses. Use include to restrict the search to file names that match a glob, such as \"*.go\" or \"*.{ts,tsx}\". Binary files and .git directories are skipped. Use this tool whenever you need to find where something is defined, used or mentioned, instead of reading files one by one. Matches are returned in full so that no result is missed.",
 "inputSchema": {"type": "object", "properties": {
   "pattern": {"type": "string", "description": "The regular expression to search for."},
   "path": {"type": "string", "description": "The absolute path of the directory (or file) to search."},
   "include": {"type": "string", "description": "A glob of the file names to search, e.g. \"*.go\"."},
   "case_sensitive": {"type": "boolean", "default": true, "description": "Match case exactly."}},
  "required": ["pattern", "path"], "additionalProperties": false}},
{"name": "run_command",
 "description": "Run a shell command in the workspace and return its exit code together with everything it printed on stdout and stderr. Commands run with /bin/sh in the workspace directory unless cwd is given, with no network access and a timeout (default 30 seconds, at most 300). Use this tool to build the project, run its tests, run scripts and use command-line tools. Do not use it to read, list or search files: use read_file, list_dir and grep, which return better structured results. Do not run interactive commands, commands that wait for input, or long-running servers. Quote paths that contain spaces. Each call runs in a fresh shell: environment changes and cd do not persist between calls; chain commands with && when one depends on another.",
 "inputSchema": {"type": "object", "properties": {
   "command": {"type": "string", "description": "The shell command to run."},
   "cwd": {"type": "string", "description": "The absolute path of the directory to run it in."},
   "timeout_s": {"type": "integer", "minimum": 1, "maximum": 300, "default": 30, "description": "Seconds before the command is killed."},
   "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables for the command."}},
  "required": ["command"], "additionalProperties": false}}
]`

// toolSize is one tool definition's size.
type toolSize struct {
	Name   string `json:"name"`
	Chars  int    `json:"chars"`
	Tokens int    `json:"tokens"`
}

// defSet is the tool definitions one way puts in the context: each tool's
// name, description and input schema as compact JSON.
type defSet struct {
	What   string     `json:"what"`
	Tools  []toolSize `json:"tools"`
	Chars  int        `json:"chars"`
	Tokens int        `json:"tokens"`
}

func (d *defSet) add(name string, compact []byte) {
	n := utf8.RuneCount(compact)
	d.Tools = append(d.Tools, toolSize{Name: name, Chars: n, Tokens: tokens(n)})
	d.Chars += n
	d.Tokens = tokens(d.Chars)
}

type benchDefs struct {
	Ours  defSet `json:"bash"`
	Naive defSet `json:"json_tools"`
}

// definitions measures the bash tool as the gateway lists it (tools/list:
// exactly one tool) and the naive tool set.
func definitions(ctx context.Context, t *testing.T, cs *mcp.ClientSession) benchDefs {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	require.NoError(t, err, "tools/list")
	require.Len(t, res.Tools, 1, "the gateway lists exactly one tool")
	require.Equal(t, bashToolName, res.Tools[0].Name)
	d := benchDefs{Ours: defSet{What: "the gateway's bash tool as tools/list gives it"},
		Naive: defSet{What: "read_file, write_file, edit_file, list_dir, grep, run_command (naiveTools)"}}
	for _, tl := range res.Tools {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(struct {
			Name        string `json:"name"`
			Description string `json:"description"`
			InputSchema any    `json:"inputSchema"`
		}{tl.Name, tl.Description, tl.InputSchema}))
		d.Ours.add(tl.Name, bytes.TrimSpace(b.Bytes()))
	}
	var tools []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(naiveTools), &tools), "naiveTools is JSON")
	for _, raw := range tools {
		var tl struct{ Name string }
		require.NoError(t, json.Unmarshal(raw, &tl))
		var b bytes.Buffer
		require.NoError(t, json.Compact(&b, raw))
		d.Naive.add(tl.Name, b.Bytes())
	}
	return d
}

// sideResult is what one way of solving a task cost.
type sideResult struct {
	Way            string   `json:"way"`
	Calls          int      `json:"calls"`
	SentChars      int      `json:"sent_chars"`
	ReturnedChars  int      `json:"returned_chars"`
	MaxAnswerChars int      `json:"max_answer_chars"`
	DefChars       int      `json:"definition_chars"`
	ContextChars   int      `json:"context_chars"`
	ContextTokens  int      `json:"context_tokens"`
	Answer         string   `json:"answer"`
	Correct        bool     `json:"correct"`
	WallMS         int64    `json:"wall_ms"`
	Commands       []string `json:"calls_made"`
}

// taskResult is one task both ways; savings are 1 - bash/json_tools, in
// percent, of the context (SavingsPct) and of the answers alone.
type taskResult struct {
	Name               string     `json:"name"`
	Question           string     `json:"question"`
	Want               string     `json:"want"`
	Ours               sideResult `json:"bash"`
	Naive              sideResult `json:"json_tools"`
	SavingsPct         float64    `json:"savings_pct"`
	ReturnedSavingsPct float64    `json:"returned_savings_pct"`
}

func (r *taskResult) fill() {
	r.Ours.Correct, r.Naive.Correct = r.Ours.Answer == r.Want, r.Naive.Answer == r.Want
	r.SavingsPct = savings(r.Ours.ContextChars, r.Naive.ContextChars)
	r.ReturnedSavingsPct = savings(r.Ours.ReturnedChars, r.Naive.ReturnedChars)
}

func savings(ours, naive int) float64 {
	if naive == 0 {
		return 0
	}
	return math.Round(10000*(1-float64(ours)/float64(naive))) / 100
}

// totals sums one way over the tasks (each task a conversation of its own,
// with the definitions in it).
type totals struct {
	Calls         int  `json:"calls"`
	SentChars     int  `json:"sent_chars"`
	ReturnedChars int  `json:"returned_chars"`
	ContextChars  int  `json:"context_chars"`
	ContextTokens int  `json:"context_tokens"`
	AllCorrect    bool `json:"all_correct"`
}

func (t *totals) add(s sideResult) {
	t.Calls += s.Calls
	t.SentChars += s.SentChars
	t.ReturnedChars += s.ReturnedChars
	t.ContextChars += s.ContextChars
	t.ContextTokens = tokens(t.ContextChars)
	t.AllCorrect = t.AllCorrect && s.Correct
}

type agentReport struct {
	GeneratedAt   time.Time    `json:"generated_at"`
	Method        string       `json:"method"`
	CharsPerToken int          `json:"chars_per_token"`
	AnswerCap     int          `json:"answer_cap_chars"`
	Definitions   benchDefs    `json:"definitions"`
	Tasks         []taskResult `json:"tasks"`
	Total         struct {
		Ours               totals  `json:"bash"`
		Naive              totals  `json:"json_tools"`
		SavingsPct         float64 `json:"savings_pct"`
		ReturnedSavingsPct float64 `json:"returned_savings_pct"`
	} `json:"total"`
	SavingsRangePct [2]float64 `json:"savings_range_pct"`
	SeedClaimPct    [2]float64 `json:"seed_000_claim_pct"`
}

func newReport(defs benchDefs, rows []taskResult) agentReport {
	rep := agentReport{GeneratedAt: time.Now().UTC().Truncate(time.Second), CharsPerToken: charsPerToken,
		AnswerCap: 10_000, Definitions: defs, Tasks: rows, SeedClaimPct: seedClaim,
		Method: "docs/benchmarks.md, section \"Agent token economy (make bench-agent)\""}
	rep.Total.Ours.AllCorrect, rep.Total.Naive.AllCorrect = true, true
	rep.SavingsRangePct = [2]float64{math.Inf(1), math.Inf(-1)}
	for _, r := range rows {
		rep.Total.Ours.add(r.Ours)
		rep.Total.Naive.add(r.Naive)
		rep.SavingsRangePct[0] = min(rep.SavingsRangePct[0], r.SavingsPct)
		rep.SavingsRangePct[1] = max(rep.SavingsRangePct[1], r.SavingsPct)
	}
	rep.Total.SavingsPct = savings(rep.Total.Ours.ContextChars, rep.Total.Naive.ContextChars)
	rep.Total.ReturnedSavingsPct = savings(rep.Total.Ours.ReturnedChars, rep.Total.Naive.ReturnedChars)
	return rep
}

// markdown renders the report as bench/out/agent.md.
func (rep agentReport) markdown() string {
	var b strings.Builder
	d := rep.Definitions
	fmt.Fprintf(&b, "# Agent token economy (make bench-agent), %s\n\n", rep.GeneratedAt.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "A scripted agent solves each task two ways on one fleet: Paddock's `bash` MCP tool (answers capped at %s characters, cut output paged from the spill file) and %d JSON tools that return everything. Context = tool definitions + the calls' arguments + the answers; tokens = characters / %d.\n\n",
		bytesCount(int64(rep.AnswerCap)), len(d.Naive.Tools), rep.CharsPerToken)
	b.WriteString("| task | calls bash / JSON | answers, chars bash / JSON | context, tokens bash / JSON | savings (context) | savings (answers) | right both ways |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|:---:|\n")
	for _, r := range rep.Tasks {
		fmt.Fprintf(&b, "| %s | %d / %d | %s / %s | %s / %s | %s | %s | %s |\n", r.Name, r.Ours.Calls, r.Naive.Calls,
			count(r.Ours.ReturnedChars), count(r.Naive.ReturnedChars), count(r.Ours.ContextTokens), count(r.Naive.ContextTokens),
			pct(r.SavingsPct), pct(r.ReturnedSavingsPct), yesNo(r.Ours.Correct && r.Naive.Correct))
	}
	o, n := rep.Total.Ours, rep.Total.Naive
	fmt.Fprintf(&b, "| **total** | %d / %d | %s / %s | %s / %s | **%s** | %s | %s |\n\n", o.Calls, n.Calls,
		count(o.ReturnedChars), count(n.ReturnedChars), count(o.ContextTokens), count(n.ContextTokens),
		pct(rep.Total.SavingsPct), pct(rep.Total.ReturnedSavingsPct), yesNo(o.AllCorrect && n.AllCorrect))
	fmt.Fprintf(&b, "Tool definitions, in every task's context: `bash` %s characters (~%s tokens); JSON tools %s characters (~%s tokens):",
		count(d.Ours.Chars), count(d.Ours.Tokens), count(d.Naive.Chars), count(d.Naive.Tokens))
	for i, tl := range d.Naive.Tools {
		sep := ","
		if i == len(d.Naive.Tools)-1 {
			sep = "."
		}
		fmt.Fprintf(&b, " %s ~%s%s", tl.Name, count(tl.Tokens), sep)
	}
	fmt.Fprintf(&b, "\n\nSeed 000 claims %s–%s %% savings; here the tasks range from %s to %s (all tasks: %s).\n\n",
		strconv.FormatFloat(rep.SeedClaimPct[0], 'f', -1, 64), strconv.FormatFloat(rep.SeedClaimPct[1], 'f', -1, 64),
		pct(rep.SavingsRangePct[0]), pct(rep.SavingsRangePct[1]), pct(rep.Total.SavingsPct))
	b.WriteString("| task | question | answer |\n|---|---|---|\n")
	for _, r := range rep.Tasks {
		fmt.Fprintf(&b, "| %s | %s | `%s` |\n", r.Name, r.Question, strings.ReplaceAll(r.Want, "|", `\|`))
	}
	return b.String()
}

func count(n int) string { return bytesCount(int64(n)) }

// pct shows a percentage with one decimal, or two above 99.9 (so that
// 99.96 is not shown as 100.0).
func pct(p float64) string {
	if p > 99.9 {
		return strconv.FormatFloat(p, 'f', 2, 64) + " %"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + " %"
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// writeReport writes bench/out/agent.json and agent.md.
func writeReport(t *testing.T, rep agentReport, md string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(benchOut, 0o755))
	js, err := json.MarshalIndent(rep, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(benchOut, "agent.json"), append(js, '\n'), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(benchOut, "agent.md"), []byte(md), 0o644))
	t.Logf("wrote %s/agent.json and agent.md", benchOut)
}
