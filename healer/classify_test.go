package healer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
)

// Real stderr, captured from paddock/sandbox (bash 5.2, dash 0.5, GNU
// coreutils, LANG=C.UTF-8) and paddock/test (busybox 1.35 sh and applets,
// static bash) running as uid 1000 on a read-only root.
func TestClassifyMissingCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, stderr, binary string
		explicit             bool
	}{
		{"bash", "bash: line 1: foo-bar: command not found\n", "foo-bar", false},
		{"bash one simple command", "bash: python: command not found\n", "python", false},
		{"bash later line", "bash: line 3: nosuch1: command not found\n", "nosuch1", false},
		{"bash name with space", "bash: line 1: my tool: command not found\n", "my tool", false},
		{"bash explicit path", "bash: line 1: /opt/nope/tool: No such file or directory\n", "/opt/nope/tool", true},
		{"bash relative path", "bash: line 1: ./tool.sh: No such file or directory\n", "./tool.sh", true},
		{"bash exec builtin", "bash: line 1: exec: nosuch4: not found\n", "nosuch4", false},
		{"bash script", "/tmp/r.sh: line 2: foo7: command not found\n", "foo7", false},
		{"dash", "sh: 1: foo-bar: not found\n", "foo-bar", false},
		{"dash explicit path", "sh: 1: /opt/nope/tool: not found\n", "/opt/nope/tool", true},
		{"dash named dash", "dash: 1: ./nosuch9: not found\n", "./nosuch9", true},
		{"dash script", "/tmp/r.sh: 2: foo7: not found\n", "foo7", false},
		{"dash exec builtin", "sh: 1: exec: nosuch4: not found\n", "nosuch4", false},
		{"busybox sh", "sh: jq: not found\n", "jq", false},
		{"busybox sh explicit path", "sh: /opt/nope/tool: not found\n", "/opt/nope/tool", true},
		{"busybox exec builtin", "sh: exec: line 0: nosuch4: not found\n", "nosuch4", false},
		{"busybox script", "/tmp/r.sh: line 2: foo7: not found\n", "foo7", false},
		{"GNU env", "env: ‘nosuch2’: No such file or directory\n", "nosuch2", false},
		{"env shebang", "/usr/bin/env: ‘python’: No such file or directory\n", "python", false},
		{"busybox env", "env: can't execute 'nosuch2': No such file or directory\n", "nosuch2", false},
		{"xargs", "xargs: nosuch3: No such file or directory\n", "nosuch3", false},
		{"GNU timeout", "timeout: failed to run command ‘nosuch5’: No such file or directory\n", "nosuch5", false},
		{"busybox timeout", "timeout: can't execute 'nosuch5': No such file or directory\n", "nosuch5", false},
		{"GNU nohup", "nohup: failed to run command 'nosuch6': No such file or directory\n", "nosuch6", false},
		{"GNU stdbuf", "stdbuf: failed to run command ‘nosuch8’: No such file or directory\n", "nosuch8", false},
		{"paddock-init", "paddock: foo: command not found\n", "foo", false},
		{"zsh", "zsh:1: command not found: foo\n", "foo", false},
		{"last report wins", "bash: line 1: a1: command not found\nsome output\nbash: line 2: b2: command not found\n", "b2", false},
		{"CRLF", "sh: 1: jq: not found\r\n", "jq", false},
		{"no wording", "", "", false},
		{"unrelated text", "something else went wrong\n", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healer.Classify(healer.Outcome{ExitCode: 127, Reason: job.ReasonExitNonzero, Stderr: tc.stderr})
			assert.Equal(t, healer.KindMissingCommand, f.Kind)
			assert.Equal(t, tc.binary, f.Binary)
			assert.Equal(t, tc.explicit, f.ExplicitPath)
			assert.False(t, f.Terminal(false))
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		out    healer.Outcome
		kind   healer.Kind
		binary string
		line   string
	}{
		{"ok", healer.Outcome{Reason: job.ReasonOK}, healer.KindOK, "", ""},
		{"ok without reason", healer.Outcome{}, healer.KindOK, "", ""},
		{"pids limit beats exit 0", healer.Outcome{Reason: job.ReasonPidsLimit}, healer.KindResourceKill, "", ""},
		{"timeout", healer.Outcome{ExitCode: -1, Reason: job.ReasonTimeout}, healer.KindResourceKill, "", ""},
		{"oom", healer.Outcome{ExitCode: 137, Reason: job.ReasonOOM}, healer.KindResourceKill, "", ""},
		{"output cap", healer.Outcome{ExitCode: -1, Reason: job.ReasonOutputCap}, healer.KindResourceKill, "", ""},
		{"fsize", healer.Outcome{ExitCode: 153, Reason: job.ReasonFsize}, healer.KindResourceKill, "", ""},
		{"canceled", healer.Outcome{ExitCode: -1, Reason: job.ReasonCanceled}, healer.KindAborted, "", ""},
		{"permission denied", healer.Outcome{ExitCode: 126, Reason: job.ReasonExitNonzero,
			Stderr: "bash: line 1: /tmp/x.sh: Permission denied\n"}, healer.KindPermissionDenied, "/tmp/x.sh", "bash: line 1: /tmp/x.sh: Permission denied"},
		{"dash permission denied", healer.Outcome{ExitCode: 126, Reason: job.ReasonExitNonzero,
			Stderr: "sh: 1: /tmp/x.sh: Permission denied\n"}, healer.KindPermissionDenied, "/tmp/x.sh", "sh: 1: /tmp/x.sh: Permission denied"},
		{"is a directory", healer.Outcome{ExitCode: 126, Reason: job.ReasonExitNonzero,
			Stderr: "bash: line 1: /tmp: Is a directory\n"}, healer.KindPermissionDenied, "/tmp", "bash: line 1: /tmp: Is a directory"},
		{"redirect target missing is not a missing command", healer.Outcome{ExitCode: 1, Reason: job.ReasonExitNonzero,
			Stderr: "bash: line 1: /nonexistent/x: No such file or directory\n"}, healer.KindFailed, "", "bash: line 1: /nonexistent/x: No such file or directory"},
		{"GNU bad option", healer.Outcome{ExitCode: 2, Reason: job.ReasonExitNonzero,
			Stderr: "ls: invalid option -- 'z'\nTry 'ls --help' for more information.\n"}, healer.KindFailed, "", "ls: invalid option -- 'z'"},
		{"busybox bad option", healer.Outcome{ExitCode: 2, Reason: job.ReasonExitNonzero,
			Stderr: "grep: invalid option -- 'P'\nBusyBox v1.35.0 (Debian 1:1.35.0-4+deb12u1+b1) multi-call binary.\n\nUsage: grep [-HhnlLoqvsrRiwFEz] ...\n"}, healer.KindFailed, "", "grep: invalid option -- 'P'"},
		{"python traceback", healer.Outcome{ExitCode: 1, Reason: job.ReasonExitNonzero,
			Stderr: "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nModuleNotFoundError: No module named 'nosuchmod'\n"}, healer.KindFailed, "", "Traceback (most recent call last):"},
		{"jq parse error", healer.Outcome{ExitCode: 4, Reason: job.ReasonExitNonzero,
			Stderr: "parse error: Invalid numeric literal at line 2, column 0\n"}, healer.KindFailed, "", "parse error: Invalid numeric literal at line 2, column 0"},
		{"signal", healer.Outcome{ExitCode: -1, Reason: job.ReasonSignal}, healer.KindFailed, "", ""},
		{"first line when nothing reads like an error", healer.Outcome{ExitCode: 3, Reason: job.ReasonExitNonzero, Stderr: "\n  hello\nworld\n"}, healer.KindFailed, "", "  hello"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healer.Classify(tc.out)
			assert.Equal(t, tc.kind, f.Kind)
			assert.Equal(t, tc.binary, f.Binary)
			assert.Equal(t, tc.line, f.Line)
		})
	}
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	kill := healer.Failure{Kind: healer.KindResourceKill, Reason: job.ReasonPidsLimit}
	assert.True(t, kill.Terminal(false))
	assert.False(t, kill.Terminal(true))
	assert.True(t, healer.Failure{Kind: healer.KindAborted}.Terminal(true))
	assert.False(t, healer.Failure{Kind: healer.KindFailed}.Terminal(false))
}

func TestFailureString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, `exit 127: "jq" not found`, healer.Failure{Kind: healer.KindMissingCommand, ExitCode: 127, Binary: "jq"}.String())
	assert.Equal(t, "pids_limit", healer.Failure{Kind: healer.KindResourceKill, Reason: job.ReasonPidsLimit, ExitCode: -1}.String())
	assert.Equal(t, `exit 2: "grep: bad"`, healer.Failure{Kind: healer.KindFailed, ExitCode: 2, Line: "grep: bad"}.String())
}

// TestClassifyFloodedStderr: a job's stderr of megabytes of garbage is read
// at its two ends only, so a shell's report at the end is still found, and
// an error-looking line in the middle of the flood is not what explains it.
func TestClassifyFloodedStderr(t *testing.T) {
	t.Parallel()
	junk := strings.Repeat("\x01\xff garbage without a newline ", 200_000) // ~5 MiB
	f := healer.Classify(healer.Outcome{ExitCode: 127, Reason: job.ReasonExitNonzero,
		Stderr: junk + "\nerror: in the middle\n" + junk + "\nbash: line 1: frobnicate: command not found\n"})
	assert.Equal(t, healer.KindMissingCommand, f.Kind)
	assert.Equal(t, "frobnicate", f.Binary)
	assert.Equal(t, "bash: line 1: frobnicate: command not found", f.Line)

	f = healer.Classify(healer.Outcome{ExitCode: 1, Reason: job.ReasonExitNonzero, Stderr: junk + "\nerror: in the middle\n" + junk})
	assert.Equal(t, healer.KindFailed, f.Kind)
	assert.NotContains(t, f.Line, "in the middle")
	assert.LessOrEqual(t, len(f.Line), 2<<10, "a line is cut at 2 KiB")
}
