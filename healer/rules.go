package healer

import (
	"context"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
)

// Rule is one deterministic repair. Apply returns the repaired command and
// true when the rule applies to command failing as f.
type Rule struct {
	Name  string
	Apply func(command string, f Failure) (string, bool)
}

// DefaultRules are the built-in repairs, tried in order. Each fixes one
// well-known way agents get a command wrong on a Debian-like image, and
// rewrites only words in command position (never arguments, quoted text
// or here-documents):
//
//	python, python3.N → python3   (Debian has no "python"; versioned names vary)
//	pip → pip3, pip3 → python3 -m pip
//	fd → fdfind, bat → batcat     (Debian's names for them)
//	sudo CMD → CMD                (no sudo in a sandbox, and no one to become)
func DefaultRules() []Rule {
	return []Rule{
		RenameRule("python", "python3"),
		{Name: "python3.N→python3", Apply: func(cmd string, f Failure) (string, bool) {
			if f.Kind != KindMissingCommand || !rePythonVersioned.MatchString(f.Binary) {
				return "", false
			}
			return replaceCommandWord(cmd, f.Binary, "python3")
		}},
		RenameRule("pip", "pip3"),
		RenameRule("pip3", "python3 -m pip"),
		RenameRule("fd", "fdfind"),
		RenameRule("bat", "batcat"),
		{Name: "strip sudo", Apply: stripSudo},
	}
}

var rePythonVersioned = regexp.MustCompile(`^python3\.\d+$`)

// ruleRepairer is the rules link of the repair chain (Config.Rules).
type ruleRepairer struct {
	rules   []Rule
	tracer  trace.Tracer
	metrics Metrics
}

// repair retries with the command of the first rule that applies and
// gives a command not yet tried.
func (rr *ruleRepairer) repair(ctx context.Context, r *run, c *repairCase) (bool, error) {
	for _, rule := range rr.rules {
		fixed, ok := rule.Apply(c.cmd, c.f)
		if !ok || strings.TrimSpace(fixed) == "" {
			continue
		}
		if r.wasTried(fixed) {
			c.noFix("rule " + rule.Name + " gives a command already tried")
			continue
		}
		_, rspan := rr.tracer.Start(ctx, "paddock.rule", trace.WithAttributes(attribute.String(job.AttrHealRule, rule.Name)))
		rspan.End()
		rr.metrics.emit(ctx, EventRuleRepair, 1)
		c.settle(Fix{Source: job.ActionRules, Command: fixed}, "rule "+rule.Name)
		return true, nil
	}
	if len(rr.rules) > 0 {
		c.noFix("no rule applies")
	}
	return false, nil
}

// RenameRule repairs a missing command from by running to instead.
func RenameRule(from, to string) Rule {
	return Rule{Name: from + "→" + to, Apply: func(cmd string, f Failure) (string, bool) {
		if f.Kind != KindMissingCommand || f.Binary != from {
			return "", false
		}
		return replaceCommandWord(cmd, from, to)
	}}
}

// stripSudo drops "sudo" and its flag words when sudo is the missing
// command. It refuses when sudo is given an option that takes an argument
// (-u user …): that command means something the sandbox cannot do.
func stripSudo(cmd string, f Failure) (string, bool) {
	if f.Kind != KindMissingCommand || f.Binary != "sudo" {
		return "", false
	}
	words := commandWords(cmd)
	var cut []span
	for _, w := range words {
		if cmd[w.start:w.end] != "sudo" {
			continue
		}
		end := w.end
		for {
			j := end
			for j < len(cmd) && (cmd[j] == ' ' || cmd[j] == '\t') {
				j++
			}
			k := j
			for k < len(cmd) && !isWordEnd(cmd[k]) {
				k++
			}
			opt := cmd[j:k]
			if !strings.HasPrefix(opt, "-") || opt == "-" {
				end = j
				break
			}
			if strings.ContainsAny(strings.TrimLeft(opt, "-"), "ugCDhpRrTU") && !strings.HasPrefix(opt, "--preserve-env") {
				return "", false
			}
			end = k
		}
		cut = append(cut, span{w.start, end})
	}
	if len(cut) == 0 {
		return "", false
	}
	out := cmd
	for i := len(cut) - 1; i >= 0; i-- {
		out = out[:cut[i].start] + out[cut[i].end:]
	}
	return out, strings.TrimSpace(out) != ""
}

// replaceCommandWord replaces every command-position word equal to from.
func replaceCommandWord(cmd, from, to string) (string, bool) {
	var hits []span
	for _, w := range commandWords(cmd) {
		if cmd[w.start:w.end] == from {
			hits = append(hits, w)
		}
	}
	if len(hits) == 0 {
		return "", false
	}
	out := cmd
	for i := len(hits) - 1; i >= 0; i-- {
		out = out[:hits[i].start] + to + out[hits[i].end:]
	}
	return out, true
}

type span struct{ start, end int }

// wrappers run their first non-option argument as a command.
var wrappers = map[string]bool{
	"env": true, "sudo": true, "doas": true, "exec": true, "command": true, "nohup": true,
	"nice": true, "time": true, "xargs": true, "stdbuf": true, "timeout": true, "setsid": true,
}

// keywords after which a command may follow.
var openers = map[string]bool{
	"if": true, "then": true, "else": true, "elif": true, "do": true, "while": true,
	"until": true, "!": true, "{": true,
}

var (
	reAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	reWrapperArg = regexp.MustCompile(`^(?:-.*|[0-9.]+[smhd]?)$`)
)

func isWordEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', ';', '&', '|', '(', ')', '<', '>':
		return true
	}
	return false
}

// commandWords returns the plain, unquoted words of a shell script that
// stand where a command name goes: at the start, after ; & | && || ( and
// newlines, after if/then/do/…, after assignments, and after wrappers such
// as env, sudo, xargs and timeout with their options. It is a
// conservative reading of POSIX shell: quoted strings, $(…), `…`, ${…},
// redirection targets, case patterns and here-document bodies are opaque,
// so a word it returns is never an argument or data. A word it misses
// only means a rule does not apply.
func commandWords(s string) []span {
	var out []span
	st := cmdState{cmdPos: true}
	var heredocs []string
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n': // line continuation
			i += 2
		case c == '\n':
			i++
			for _, d := range heredocs {
				i = skipHeredoc(s, i, d)
			}
			heredocs = nil
			st.cmdPos, st.wrapped = true, false
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == ';' || c == '&' || c == '|':
			i++
			st.cmdPos, st.wrapped = true, false
		case c == '(':
			i++
			st.depth++
			st.cmdPos, st.wrapped = true, false
		case c == ')':
			// Closing a subshell: what follows is not a command. An
			// unopened ")" ends a case pattern: a command follows.
			i++
			st.cmdPos, st.wrapped = st.depth == 0, false
			if st.depth > 0 {
				st.depth--
			}
		case c == '<' || c == '>':
			j := i
			for j < len(s) && strings.IndexByte("<>&|-", s[j]) >= 0 {
				j++
			}
			op := s[i:j]
			for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				j++
			}
			k := skipWord(s, j)
			if strings.HasPrefix(op, "<<") && !strings.HasPrefix(op, "<<<") {
				heredocs = append(heredocs, unquoteDelimiter(s[j:k]))
			}
			i = k
		default:
			j := skipWord(s, i)
			if j == i { // a lone special character we do not model
				i++
				st.cmdPos = false
				continue
			}
			if st.word(s, i, j) {
				out = append(out, span{i, j})
			}
			i = j
		}
	}
	return out
}

// cmdState is where commandWords stands in the shell grammar.
type cmdState struct {
	cmdPos  bool // a command name may come next
	wrapped bool // after a wrapper (env, sudo, …): its options may come first
	depth   int  // open ( subshells
}

// word reads the word s[i:j] and reports whether it is a plain word in
// command position.
func (st *cmdState) word(s string, i, j int) bool {
	word := s[i:j]
	switch {
	case j < len(s) && (s[j] == '<' || s[j] == '>') && isDigits(word):
		// an fd number of a redirection: "2>&1"
	case j < len(s) && s[j] == ')' && st.depth == 0:
		st.cmdPos = false // a case pattern: "pat)"
	case !st.cmdPos:
	case reAssignment.MatchString(word):
		// VAR=value keeps command position
	case openers[word]:
		st.wrapped = false
	case st.wrapped && reWrapperArg.MatchString(word):
		// an option of env/sudo/timeout/…
	case word == "{" || word == "}":
		st.cmdPos = word == "{"
	default:
		st.wrapped = wrappers[word]
		st.cmdPos = st.wrapped
		return !strings.ContainsAny(word, "'\"\\$`*?[]{}~")
	}
	return false
}

// skipWord returns the end of the word starting at i, stepping over
// quoted strings, escapes, $(…), ${…} and `…` as opaque parts of it.
func skipWord(s string, i int) int {
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			i += 2
		case c == '\'':
			if k := strings.IndexByte(s[i+1:], '\''); k >= 0 {
				i += k + 2
			} else {
				return len(s)
			}
		case c == '"':
			i = skipDouble(s, i+1)
		case c == '`':
			if k := strings.IndexByte(s[i+1:], '`'); k >= 0 {
				i += k + 2
			} else {
				return len(s)
			}
		case c == '$' && i+1 < len(s) && (s[i+1] == '(' || s[i+1] == '{'):
			i = skipBalanced(s, i+1)
		case isWordEnd(c):
			return min(i, len(s))
		default:
			i++
		}
	}
	return len(s)
}

// skipDouble returns the index after the closing quote of a "…" string
// whose content starts at i.
func skipDouble(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i + 1
		case '$':
			if i+1 < len(s) && (s[i+1] == '(' || s[i+1] == '{') {
				i = skipBalanced(s, i+1)
				continue
			}
		}
		i++
	}
	return len(s)
}

// skipBalanced returns the index after the bracket matching s[i] ("(" or "{").
func skipBalanced(s string, i int) int {
	open := s[i]
	closer := byte(')')
	if open == '{' {
		closer = '}'
	}
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '\\':
			i += 2
			continue
		case c == '\'' && open == '(':
			if k := strings.IndexByte(s[i+1:], '\''); k >= 0 {
				i += k + 2
				continue
			}
			return len(s)
		case c == '"':
			i = skipDouble(s, i+1)
			continue
		case c == open:
			depth++
		case c == closer:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s)
}

// skipHeredoc returns the index after the line that ends a here-document
// whose body starts at i (tabs before the delimiter allowed, as for <<-).
func skipHeredoc(s string, i int, delim string) int {
	for i < len(s) {
		end := strings.IndexByte(s[i:], '\n')
		line := s[i:]
		next := len(s)
		if end >= 0 {
			line, next = s[i:i+end], i+end+1
		}
		if strings.TrimLeft(line, "\t") == delim {
			return next
		}
		i = next
	}
	return len(s)
}

func unquoteDelimiter(w string) string {
	return strings.NewReplacer(`'`, "", `"`, "", `\`, "").Replace(w)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
