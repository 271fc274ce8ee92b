package healer_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
)

// Stderr is attacker-controlled: classification must never panic and
// must only report names that appear in it.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"bash: line 1: foo: command not found\n", "sh: 1: x: not found", "sh: jq: not found",
		"env: ‘a’: No such file or directory", "timeout: failed to run command ‘b’: No such file or directory",
		"bash: line 1: /x: Permission denied", ": : : not found", "\xff: line 1: \x00: command not found",
	} {
		f.Add(127, s)
		f.Add(126, s)
	}
	f.Fuzz(func(t *testing.T, code int, stderr string) {
		fl := healer.Classify(healer.Outcome{ExitCode: code, Reason: job.ReasonExitNonzero, Stderr: stderr})
		if fl.Binary != "" && !strings.Contains(stderr, fl.Binary) {
			t.Fatalf("binary %q not in stderr %q", fl.Binary, stderr)
		}
		if fl.Line != "" && !strings.Contains(stderr, strings.TrimSpace(fl.Line)) {
			t.Fatalf("line %q not in stderr", fl.Line)
		}
		_ = healer.Fingerprint("", "img", "cmd", fl)
	})
}

// LLM replies are untrusted: a parsed command is non-empty, bounded and
// free of NUL bytes.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"```sh\nls\n```", "ls", "PADDOCK_NO_FIX", "```\n```", "```a```", "~~~\nx\n~~~\n```", "$ ls", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		cmd, err := healer.ParseReply(reply)
		if err != nil {
			return
		}
		if strings.TrimSpace(cmd) == "" || len(cmd) > healer.MaxCommandBytes || strings.IndexByte(cmd, 0) >= 0 || !utf8.ValidString(cmd) {
			t.Fatalf("accepted %q from %q", cmd, reply)
		}
	})
}

// Commands are the agent's: the rule scanner must never panic, and a
// rewrite only ever replaces whole command words.
func FuzzCommandWords(f *testing.F) {
	for _, s := range []string{"python x", "a | b && c; d", "cat <<E\npython\nE", "x=$(python)", "case a in python) python;; esac", "'", "\"$(", "\\", "<<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		for _, w := range healer.CommandWords(script) {
			if w == "" || !strings.Contains(script, w) {
				t.Fatalf("word %q not in %q", w, script)
			}
		}
		out, ok := healer.ReplaceCommandWord(script, "python", "python3")
		if !ok && out != "" {
			t.Fatalf("no rewrite but output %q", out)
		}
		if ok && len(out) <= len(script) {
			t.Fatalf("rewrite did not grow: %q → %q", script, out)
		}
	})
}
