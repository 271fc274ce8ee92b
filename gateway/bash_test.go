package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// The description costs every agent its tokens: at most 100 by the
// 4-characters-a-token estimate, and it says what an agent must know.
func TestBashDescription(t *testing.T) {
	t.Parallel()
	n := utf8.RuneCountInString(bashDescription)
	assert.LessOrEqual(t, n, 400, "at most 100 tokens at 4 characters a token")
	t.Logf("description: %d characters (~%d tokens); schema: %d bytes", n, (n+3)/4, len(bashSchema))
	for _, must := range []string{"bash", "fresh sandbox", "no network", "/workspace persists", "capped", "file", "head", "tail", "grep", "sed"} {
		assert.Contains(t, bashDescription, must)
	}
}

// The schema is small, valid JSON of an object that requires command and
// bounds timeout_s to 1..300.
func TestBashSchema(t *testing.T) {
	t.Parallel()
	var s struct {
		Type       string `json:"type"`
		Required   []string
		Properties map[string]struct {
			Type     string `json:"type"`
			Min, Max *int   `json:",omitempty"`
			Minimum  *int   `json:"minimum"`
			Maximum  *int   `json:"maximum"`
		}
		AdditionalProperties *bool `json:"additionalProperties"`
	}
	require.NoError(t, json.Unmarshal(bashSchema, &s))
	assert.Equal(t, "object", s.Type)
	assert.Equal(t, []string{"command"}, s.Required)
	assert.Equal(t, "string", s.Properties["command"].Type)
	assert.Equal(t, "string", s.Properties["image"].Type)
	ts := s.Properties["timeout_s"]
	require.NotNil(t, ts.Minimum)
	require.NotNil(t, ts.Maximum)
	assert.Equal(t, "integer", ts.Type)
	assert.Equal(t, []int{1, 300}, []int{*ts.Minimum, *ts.Maximum})
	require.NotNil(t, s.AdditionalProperties)
	assert.False(t, *s.AdditionalProperties)
	assert.Less(t, len(bashSchema), 300, "keep the schema small")
	// The fields the handler reads are the schema's.
	var in bashInput
	require.NoError(t, json.Unmarshal([]byte(`{"command":"ls","timeout_s":5,"image":"x"}`), &in))
	assert.Equal(t, bashInput{Command: "ls", TimeoutS: 5, Image: "x"}, in)
}

// output is what a worker reports for text with a capture cap of capBytes:
// whole when it fits, else its head and tail (cut at rune boundaries).
func output(text string, capBytes int) job.Output {
	if len(text) <= capBytes {
		return job.Output{Text: text, Bytes: int64(len(text))}
	}
	h := runeOffsetAtMost(text, capBytes/2)
	t := len(text) - capBytes/2
	for t < len(text) && !utf8.RuneStart(text[t]) {
		t++
	}
	return job.Output{Text: text[:h], Tail: text[t:], Bytes: int64(len(text)), Truncated: true, OmittedBytes: int64(t - h)}
}

// runeOffsetAtMost is the largest rune boundary of s at or below n.
func runeOffsetAtMost(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	return b.String()
}

func exit(n int) *int { return &n }

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func okResult(id string, stdout, stderr job.Output) job.Result {
	r := job.Result{ID: id, ExitCode: exit(0), Stdout: stdout, Stderr: stderr, StartedAt: t0, FinishedAt: t0.Add(1240 * time.Millisecond)}
	r.Finish(job.ReasonOK)
	return r
}

func spilled(id string) *job.Spilled {
	return &job.Spilled{Stdout: job.SpillFile{Path: job.SpillPath(id, "stdout")}, Stderr: job.SpillFile{Path: job.SpillPath(id, "stderr")}}
}

// Small answers are exact: a status line, then the output as it is.
func TestFormatAnswerSmall(t *testing.T) {
	t.Parallel()
	failed := okResult("j2", output("", 1<<20), output("boom\n", 1<<20))
	failed.ExitCode = exit(3)
	failed.Finish(job.ReasonExitNonzero)
	for _, tc := range []struct {
		name  string
		r     job.Result
		want  string
		isErr bool
	}{
		{"stdout", okResult("j1", output("hello\nworld", 1<<20), job.Output{}),
			"exit 0 · ok · 1.24 s · job j1\nhello\nworld\n", false},
		{"nothing", okResult("j1", job.Output{}, job.Output{}),
			"exit 0 · ok · 1.24 s · job j1\n(no output)\n", false},
		{"stderr labelled", failed,
			"exit 3 · exit_nonzero · 1.24 s · job j2\n--- stderr ---\nboom\n", false},
		{"both", okResult("j3", output("out\n", 1<<20), output("err\n", 1<<20)),
			"exit 0 · ok · 1.24 s · job j3\nout\n--- stderr ---\nerr\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, isErr := formatAnswer(tc.r, 10_000)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.isErr, isErr)
		})
	}
}

// cutRe matches a cut marker and captures the bytes cut and the path.
var cutRe = regexp.MustCompile(`\[… ([0-9,]+) bytes cut; full (stdout|stderr): (\S+) — page it with sed -n '100,200p', grep, tail\]\n`)

// A huge output keeps a head and a tail cut on line boundaries, says
// exactly how many bytes were cut and where the whole output is, and the
// answer never passes the cap.
func TestFormatAnswerHuge(t *testing.T) {
	t.Parallel()
	all := seq(1, 200000) // 1,288,895 bytes
	for _, tc := range []struct {
		name string
		out  job.Output
	}{
		{"truncated by the worker", output(all, 1<<20)},
		{"whole in the result", output(all, 2<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := okResult("01JHUGE", tc.out, job.Output{})
			r.Spilled = spilled("01JHUGE")
			for _, limit := range []int{1000, 4096, 10_000, 100_000} {
				got, isErr := formatAnswer(r, limit)
				assert.False(t, isErr)
				assert.LessOrEqual(t, utf8.RuneCountInString(got), limit)
				m := cutRe.FindStringSubmatchIndex(got)
				require.NotNil(t, m, "a cut marker in %q", got)
				head := got[strings.IndexByte(got, '\n')+1 : m[0]]
				tail := got[m[1]:]
				assert.True(t, strings.HasPrefix(all, head), "the head is the output's start")
				assert.True(t, strings.HasSuffix(all, tail), "the tail is the output's end")
				assert.True(t, strings.HasPrefix(head, "1\n2\n") && strings.HasSuffix(tail, "199999\n200000\n"))
				assert.True(t, strings.HasPrefix(tail, strconv.Itoa(200001-strings.Count(tail, "\n"))+"\n"), "the tail starts at a line")
				cut, _ := strconv.Atoi(strings.ReplaceAll(got[m[2]:m[3]], ",", ""))
				assert.Equal(t, len(all)-len(head)-len(tail), cut, "bytes cut = total - shown")
				assert.Equal(t, "/workspace/.paddock/out/01JHUGE.stdout", got[m[6]:m[7]])
				assert.Greater(t, utf8.RuneCountInString(got), limit*9/10, "the budget is used")
			}
		})
	}
}

// Two huge streams share the budget; a small one is shown whole next to a
// huge one.
func TestFormatAnswerTwoStreams(t *testing.T) {
	t.Parallel()
	big := seq(1, 100000)
	r := okResult("j", output(big, 1<<20), output(strings.Repeat("warning: x\n", 50000), 1<<20))
	r.Spilled = spilled("j")
	got, _ := formatAnswer(r, 10_000)
	assert.LessOrEqual(t, utf8.RuneCountInString(got), 10_000)
	ms := cutRe.FindAllStringSubmatch(got, -1)
	require.Len(t, ms, 2)
	assert.Equal(t, "stdout", ms[0][2])
	assert.Equal(t, "stderr", ms[1][2])
	out, errPart, ok := strings.Cut(got, "--- stderr ---\n")
	require.True(t, ok)
	assert.InDelta(t, len(out), len(errPart), 400, "each stream gets half")

	r.Stderr = output("one warning\n", 1<<20)
	got, _ = formatAnswer(r, 10_000)
	assert.LessOrEqual(t, utf8.RuneCountInString(got), 10_000)
	assert.True(t, strings.HasSuffix(got, "--- stderr ---\none warning\n"), "the small stream is whole")
	assert.Len(t, cutRe.FindAllString(got, -1), 1)
}

// Multi-byte output is counted in characters and never split inside a
// character.
func TestFormatAnswerUTF8(t *testing.T) {
	t.Parallel()
	line := "héllo wörld — 😀 日本語\n"
	all := strings.Repeat(line, 20000)
	for _, cap := range []int{1 << 20, 4 << 20} {
		r := okResult("u", output(all, cap), output(strings.Repeat("é", 30000), cap))
		r.Spilled = spilled("u")
		got, _ := formatAnswer(r, 10_000)
		assert.True(t, utf8.ValidString(got))
		assert.LessOrEqual(t, utf8.RuneCountInString(got), 10_000)
		assert.Greater(t, len(got), 10_000, "more bytes than characters: characters are counted")
		body := got[strings.IndexByte(got, '\n')+1:]
		for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
			if strings.HasPrefix(l, "[… ") || strings.HasPrefix(l, "---") || strings.Trim(l, "é") == "" {
				continue
			}
			assert.Equal(t, strings.TrimSuffix(line, "\n"), l, "stdout is cut at line boundaries")
		}
	}
}

// What the healer did is one line per repair.
func TestFormatAnswerHealed(t *testing.T) {
	t.Parallel()
	r := okResult("h", output("hi\n", 1<<20), job.Output{})
	r.Attempts = []job.Attempt{
		{N: 1, Action: job.ActionInitial, Command: "python x.py", ExitCode: 127, Reason: job.ReasonExitNonzero},
		{N: 2, Action: job.ActionRules, Command: "python3 x.py", Reason: job.ReasonOK, Note: "exit 127: \"python\" not found → rule python→python3"},
	}
	got, _ := formatAnswer(r, 10_000)
	assert.Equal(t, "exit 0 · ok · 1.24 s · job h\nhealed: ran `python3 x.py` instead of `python x.py` (rules)\nhi\n", got)

	r.Attempts = []job.Attempt{
		{N: 1, Action: job.ActionInitial, Command: "jq --version", ExitCode: 127, Reason: job.ReasonExitNonzero},
		{N: 2, Action: job.ActionInstall, Command: "jq --version", Reason: job.ReasonOK, Install: "b='jq' …",
			Note: "exit 127: \"jq\" not found → installed jq, libjq1, libonig5 in 31ms; same command again"},
	}
	got, _ = formatAnswer(r, 10_000)
	assert.Contains(t, got, "\nhealed: installed jq, libjq1, libonig5 in 31ms, then ran `jq --version` again (install)\n")

	// A repair that failed too, with a long multi-line command.
	long := "for i in $(seq 1 100); do\n  echo $i\ndone " + strings.Repeat("x", 300)
	r.Attempts = []job.Attempt{
		{N: 1, Action: job.ActionInitial, Command: long, ExitCode: 2, Reason: job.ReasonExitNonzero},
		{N: 2, Action: job.ActionLLM, Command: "echo fixed", ExitCode: 1, Reason: job.ReasonExitNonzero, Note: "…; stop: attempt limit 2 reached"},
	}
	r.ExitCode = exit(1)
	r.Finish(job.ReasonExitNonzero)
	got, isErr := formatAnswer(r, 10_000)
	assert.False(t, isErr)
	lines := strings.Split(got, "\n")
	assert.True(t, strings.HasPrefix(lines[1], "heal failed: ran `echo fixed` instead of `for i in $(seq 1 100); do echo $i done xxx"), lines[1])
	assert.LessOrEqual(t, utf8.RuneCountInString(lines[1]), 260, "commands are shortened")
}

// Refusals, kills and infrastructure failures are error answers that say
// what happened and what to do.
func TestFormatAnswerErrors(t *testing.T) {
	t.Parallel()
	rejected := job.Result{ID: "r", Error: "the job is invalid: fix the fields listed",
		Errors: []job.FieldError{{Field: "limits.command_timeout_s", Message: "100000 is out of range; allowed 1..300 s"}}}
	rejected.Finish(job.ReasonRejected)
	got, isErr := formatAnswer(rejected, 10_000)
	assert.True(t, isErr)
	assert.Equal(t, "rejected · job r\nerror: the job is invalid: fix the fields listed\nlimits.command_timeout_s: 100000 is out of range; allowed 1..300 s\n", got)

	timeout := okResult("t", output("partial\n", 1<<20), job.Output{})
	timeout.ExitCode = exit(-1)
	timeout.Limits = &job.Effective{CommandTimeout: 5 * time.Second}
	timeout.Finish(job.ReasonTimeout)
	got, isErr = formatAnswer(timeout, 10_000)
	assert.True(t, isErr)
	assert.Contains(t, got, "exit -1 · timeout · 1.24 s · job t\nkilled at the timeout (5s): pass a larger timeout_s")
	assert.True(t, strings.HasSuffix(got, "\npartial\n"))

	full := okResult("f", job.Output{}, job.Output{})
	full.VolumeBytes = 300 << 20
	full.Finish(job.ReasonFsize)
	got, isErr = formatAnswer(full, 10_000)
	assert.True(t, isErr)
	assert.Contains(t, got, "the workspace is over its quota (300.0 MiB used): delete files under /workspace")
	assert.NotContains(t, got, "(no output)")

	// Many field errors are listed up to 5.
	many := job.Result{ID: "m"}
	for i := range 9 {
		many.Errors = append(many.Errors, job.FieldError{Field: fmt.Sprintf("f%d", i), Message: "bad"})
	}
	many.Finish(job.ReasonRejected)
	got, _ = formatAnswer(many, 10_000)
	assert.Contains(t, got, "f4: bad\n(and 4 more errors)\n")
	assert.NotContains(t, got, "f5")
}

// Without a spill file, or with an incomplete one, the marker says so
// instead of naming a file that does not hold the output.
func TestFormatAnswerSpillMissing(t *testing.T) {
	t.Parallel()
	r := okResult("s", output(seq(1, 100000), 1<<20), job.Output{})
	got, _ := formatAnswer(r, 5000)
	assert.Regexp(t, `\n\[… [0-9,]+ bytes cut; the full stdout was not saved\]\n`, got)
	assert.NotContains(t, got, "/workspace")

	r.Spilled = spilled("s")
	r.Spilled.Stdout.Error = "the volume's quota was reached"
	got, _ = formatAnswer(r, 5000)
	assert.Contains(t, got, "bytes cut; the stdout file is incomplete (the volume's quota was reached): /workspace/.paddock/out/s.stdout]\n")
	assert.LessOrEqual(t, utf8.RuneCountInString(got), 5000)
}

func TestCutHelpers(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "1,234,567", bytesCount(1234567))
	assert.Equal(t, "999", bytesCount(999))
	assert.Equal(t, "1,000", bytesCount(1000))
	assert.Equal(t, "0", bytesCount(0))
	assert.Equal(t, "ab…", capRunes("abcdef", 3))
	assert.Equal(t, "é…", capRunes("ééé", 2))
	assert.Equal(t, "abc", capRunes("abc", 3))
	assert.Equal(t, "a\nb\n", headRunes("a\nb\ncdef", 6), "cut after the last newline")
	assert.Equal(t, "a\nbcdefgh", headRunes("a\nbcdefghij", 9), "no newline in the second half: a plain cut")
	assert.Equal(t, "d\n", tailRunes("abc\nd\n", 4), "start after the first newline")
	assert.Equal(t, "日本", tailRunes("x日本", 2))
	assert.Equal(t, "a b c", oneLine(" a\n\tb  c ", 10))
}

// FuzzFormatAnswer: whatever the output, the answer is within the cap,
// valid UTF-8 when the output is, and holds a whole output that fits.
func FuzzFormatAnswer(f *testing.F) {
	// Small inputs, repeated: the fuzzer mutates and minimizes them fast.
	f.Add("hello\n", "", uint16(0), 1000, 1<<20, uint8(0))
	f.Add("12345\n", "err\n", uint16(5000), 1000, 4096, uint8(1))
	f.Add("é😀\n", "x", uint16(3000), 2500, 1000, uint8(2))
	f.Fuzz(func(t *testing.T, stdout, stderr string, rep uint16, limit, capBytes int, flags uint8) {
		stdout = strings.Repeat(stdout, 1+int(rep)%5000)
		if flags&4 != 0 {
			stderr = strings.Repeat(stderr, 1+int(rep)%5000)
		}
		limit = 1000 + abs(limit)%20_000
		capBytes = 1 + abs(capBytes)%(1<<16)
		r := okResult("fz", output(stdout, capBytes), output(stderr, capBytes))
		if flags&1 != 0 {
			r.Spilled = spilled("fz")
		}
		if flags&2 != 0 {
			r.Attempts = []job.Attempt{{Command: stdout}, {Action: job.ActionLLM, Command: stderr, Reason: job.ReasonOK}}
		}
		got, _ := formatAnswer(r, limit)
		if n := utf8.RuneCountInString(got); n > limit {
			t.Fatalf("%d characters; cap %d", n, limit)
		}
		if utf8.ValidString(stdout) && utf8.ValidString(stderr) && !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out of valid input: %q", got)
		}
		if stderr == "" && flags&2 == 0 && len(stdout) <= capBytes && utf8.RuneCountInString(stdout) < limit-100 &&
			!strings.Contains(got, stdout) {
			t.Fatalf("a fitting output is not whole in %q", got)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // MinInt
			return 0
		}
		return -n
	}
	return n
}
