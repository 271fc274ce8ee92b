package healer

import (
	"regexp"
	"strings"

	"github.com/paddockhq/paddock/job"
)

// Kind is the class of a command's outcome, as far as healing cares.
type Kind string

const (
	// KindOK: the command succeeded.
	KindOK Kind = "ok"
	// KindMissingCommand: exit 127, a command the shell (or env, xargs,
	// timeout …) could not find.
	KindMissingCommand Kind = "missing_command"
	// KindPermissionDenied: exit 126, found but not executable (no x bit,
	// a noexec mount, a directory).
	KindPermissionDenied Kind = "permission_denied"
	// KindResourceKill: timeout, oom, pids_limit, output_cap or fsize; the
	// sandbox killed the command. Terminal unless the policy says otherwise.
	KindResourceKill Kind = "resource_kill"
	// KindFailed: any other non-zero exit, or death by another signal.
	KindFailed Kind = "failed"
	// KindAborted: canceled, lease lost, infrastructure: never healed.
	KindAborted Kind = "aborted"
)

// Failure is a classified outcome.
type Failure struct {
	Kind     Kind
	ExitCode int
	Reason   job.Reason
	// Binary is the command the shell could not find or run, exactly as it
	// reported it ("jq", "/opt/tool/bin/x", "./run.sh"); "" when the
	// output named none.
	Binary string
	// ExplicitPath is true when Binary contains a slash: no install can
	// make that path appear.
	ExplicitPath bool
	// Line is the stderr line the classification came from, or the first
	// line that reads like an error ("" when stderr was empty).
	Line string
}

// Terminal reports whether no repair may follow f under policy.
func (f Failure) Terminal(retryResourceKills bool) bool {
	switch f.Kind {
	case KindOK, KindAborted:
		return true
	case KindResourceKill:
		return !retryResourceKills
	}
	return false
}

// String describes f in a few words, for attempt notes.
func (f Failure) String() string {
	var b strings.Builder
	switch f.Kind {
	case KindOK:
		return "ok"
	case KindResourceKill, KindAborted:
		b.WriteString(string(f.Reason))
	default:
		b.WriteString("exit ")
		b.WriteString(itoa(f.ExitCode))
	}
	switch f.Kind {
	case KindMissingCommand:
		if f.Binary != "" {
			b.WriteString(": " + quoteNote(f.Binary) + " not found")
		} else {
			b.WriteString(": command not found")
		}
	case KindPermissionDenied:
		if f.Binary != "" {
			b.WriteString(": " + quoteNote(f.Binary) + " not executable")
		} else {
			b.WriteString(": permission denied")
		}
	case KindFailed:
		if f.Reason == job.ReasonSignal {
			b.WriteString(" (signal)")
		}
		if f.Line != "" {
			b.WriteString(": " + quoteNote(job.Truncate(f.Line, 120)))
		}
	}
	return b.String()
}

// resourceKills are the reasons the sandbox's limits produce.
var resourceKills = map[job.Reason]bool{
	job.ReasonTimeout: true, job.ReasonOOM: true, job.ReasonPidsLimit: true,
	job.ReasonOutputCap: true, job.ReasonFsize: true,
}

// Wordings of "command not found" and friends, captured from bash 5.2,
// dash 0.5 and busybox 1.35 sh as shipped in paddock/sandbox and
// paddock/test, and from GNU/busybox env, xargs, timeout and nohup
// (classify_test.go holds the real samples). The program prefix may be a
// shell ("bash", "/bin/sh") or a script ("./run.sh"); "line N: " (bash,
// busybox in scripts) or "N: " (dash) may follow it.
var (
	// bash, zsh-less: "bash: line 1: foo: command not found",
	// "bash: foo: command not found", "./x.sh: line 3: foo: command not found".
	reBashNotFound = regexp.MustCompile(`^[^:]{1,256}: (?:line \d+: )?(?:exec: )?(.+): command not found$`)
	// dash and busybox, and bash's exec builtin: "sh: 1: foo: not found",
	// "bash: line 1: exec: foo: not found", "sh: exec: line 0: foo: not found".
	reNumberedNotFound = regexp.MustCompile(`^[^:]{1,256}: (?:line \d+|\d+): (?:exec: (?:line \d+: )?)?(.+): not found$`)
	reExecNotFound     = regexp.MustCompile(`^[^:]{1,256}: exec: (?:line \d+: )?(.+): not found$`)
	// busybox sh without a line number: "sh: foo: not found"; only for a
	// shell program, so that "grep: x: not found"-like tool output is not
	// taken for a missing command.
	reShellNotFound = regexp.MustCompile(`^(?:\S*/)?(?:sh|ash|dash|bash|busybox|hush): (.+): not found$`)
	// zsh: "zsh:1: command not found: foo".
	reZshNotFound = regexp.MustCompile(`^zsh:\d+: command not found: (.+)$`)
	// An explicit path the shell could not find (exit 127 only: the same
	// wording also reports a missing redirection target, exit 1):
	// "bash: line 1: /opt/x: No such file or directory".
	reShellNoSuchFile = regexp.MustCompile(`^[^:]{1,256}: (?:line \d+: |\d+: )?(.+): No such file or directory$`)
	// Programs that exec another: GNU "env: ‘foo’: No such file or
	// directory", "/usr/bin/env: 'python': No such file or directory"
	// (a shebang), busybox "env: can't execute 'foo': No such file or
	// directory", "xargs: foo: No such file or directory", GNU "timeout:
	// failed to run command ‘foo’: No such file or directory", "nohup:
	// failed to run command 'foo': …", busybox "timeout: can't execute 'foo': …".
	reExecerNoSuchFile = regexp.MustCompile(`^(?:\S*/)?(?:env|xargs|timeout|nohup|nice|stdbuf|setsid|chroot|sudo|doas|time|watch|parallel): (?:failed to run command |can't execute |cannot run |unable to run )?['‘’"]?(.+?)['‘’"]?: No such file or directory$`)
	// paddock-init when argv[0] itself was not found: "paddock: foo: command not found".
	// (Matched by reBashNotFound.)

	// exit 126: "bash: line 1: ./x.sh: Permission denied", "sh: 1: /tmp: Permission denied",
	// "bash: line 1: /tmp: Is a directory".
	rePermission = regexp.MustCompile(`^[^:]{1,256}: (?:line \d+: |\d+: )?(?:exec: )?(.+): (?:Permission denied|Is a directory|cannot execute binary file.*|Exec format error)$`)

	reErrorish = regexp.MustCompile(`(?i)error|fail|invalid|unrecogni[sz]ed|not found|no such|denied|cannot|can't|usage:|unknown|traceback|exception|fatal|panic|refused|missing|expected|unexpected|not permitted|illegal`)
)

// Classify tells what kind of failure o is and, for a missing or
// non-executable command, which one. It reads o.Reason first (limits the
// sandbox enforced beat the exit code), then the exit code, then stderr.
func Classify(o Outcome) Failure {
	o.Stderr = classifyView(o.Stderr)
	f := Failure{ExitCode: o.ExitCode, Reason: o.Reason}
	if f.Reason == "" {
		f.Reason = job.ReasonExitNonzero
		if o.ExitCode == 0 {
			f.Reason = job.ReasonOK
		}
	}
	switch {
	case f.Reason == job.ReasonOK:
		f.Kind = KindOK
		return f
	case resourceKills[f.Reason]:
		f.Kind = KindResourceKill
		f.Line = firstErrorLine(o.Stderr)
		return f
	case f.Reason != job.ReasonExitNonzero && f.Reason != job.ReasonSignal:
		f.Kind = KindAborted
		return f
	}
	lines := stderrLines(o.Stderr)
	switch {
	case f.Reason == job.ReasonExitNonzero && o.ExitCode == 127:
		f.Kind = KindMissingCommand
		// The last report is the one that made the shell exit 127.
		for i := len(lines) - 1; i >= 0; i-- {
			if name, ok := missingName(lines[i]); ok {
				f.Binary, f.Line = name, lines[i]
				break
			}
		}
	case f.Reason == job.ReasonExitNonzero && o.ExitCode == 126:
		f.Kind = KindPermissionDenied
		for i := len(lines) - 1; i >= 0; i-- {
			if m := rePermission.FindStringSubmatch(lines[i]); m != nil {
				f.Binary, f.Line = cleanName(m[1]), lines[i]
				break
			}
		}
	default:
		f.Kind = KindFailed
	}
	f.ExplicitPath = strings.Contains(f.Binary, "/")
	if f.Line == "" {
		f.Line = firstErrorLine(o.Stderr)
	}
	return f
}

// missingName extracts the command name from one stderr line reporting a
// missing command, whatever the shell's wording.
func missingName(line string) (string, bool) {
	for _, re := range []*regexp.Regexp{reZshNotFound, reBashNotFound, reExecNotFound, reNumberedNotFound, reShellNotFound, reExecerNoSuchFile} {
		if m := re.FindStringSubmatch(line); m != nil {
			if name := cleanName(m[1]); name != "" {
				return name, true
			}
		}
	}
	if m := reShellNoSuchFile.FindStringSubmatch(line); m != nil {
		if name := cleanName(m[1]); strings.Contains(name, "/") {
			return name, true
		}
	}
	return "", false
}

// cleanName strips the quotes some programs put around a name.
func cleanName(s string) string {
	s = strings.TrimSpace(s)
	s = strings.Trim(s, "'\"‘’`")
	return strings.TrimSpace(s)
}

// stderrLines returns the non-empty lines of s, without "\r".
// Bounds of what Classify reads of stderr: its first and last
// classifyEnds bytes, lines cut at classifyLine bytes. The job controls
// stderr (up to its output cap, 16 MiB); the classifier's regexps must not
// cost the worker seconds of CPU for a flood. A shell's own report is short
// and sits at the start or the end.
const (
	classifyEnds = 32 << 10
	classifyLine = 2 << 10
)

// classifyView is s, or its two ends when s is longer than 2×classifyEnds.
func classifyView(s string) string {
	if len(s) <= 2*classifyEnds {
		return s
	}
	return s[:classifyEnds] + "\n" + s[len(s)-classifyEnds:]
}

func stderrLines(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimRight(line, "\r \t")
		if len(line) > classifyLine {
			line = line[:classifyLine]
		}
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// firstErrorLine is the first stderr line that reads like an error, else
// the first non-empty one.
func firstErrorLine(s string) string {
	lines := stderrLines(s)
	for _, l := range lines {
		if reErrorish.MatchString(l) {
			return l
		}
	}
	if len(lines) > 0 {
		return lines[0]
	}
	return ""
}
