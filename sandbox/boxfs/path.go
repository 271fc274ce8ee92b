package boxfs

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of a path under the root (mirrors of package job's).
const (
	MaxPathBytes = 1024
	MaxPathElem  = 255
)

// CheckPath reports whether p can name a file under the root: a relative,
// clean path of valid UTF-8 of at most MaxPathBytes, elements of at most
// MaxPathElem bytes, no "." or ".." element, no empty element, no control
// character (newlines included), nothing under ".paddock/" (kept for
// Paddock). It mirrors job.CheckPath, which boxfs must not import; a test
// holds the two together.
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("is %d bytes; at most %d allowed", len(p), MaxPathBytes)
	case !utf8.ValidString(p):
		return errors.New("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must be relative to the workspace, not absolute", short(p))
	case strings.ContainsFunc(p, unicode.IsControl):
		return fmt.Errorf("%q contains a control character (such as a newline)", short(p))
	}
	for _, e := range strings.Split(p, "/") {
		switch {
		case e == "" || e == ".":
			return fmt.Errorf("%q has an empty or '.' element; write a clean path", short(p))
		case e == "..":
			return fmt.Errorf("%q must not contain '..'", short(p))
		case len(e) > MaxPathElem:
			return fmt.Errorf("has an element of %d bytes; at most %d allowed", len(e), MaxPathElem)
		}
	}
	if p == ".paddock" || strings.HasPrefix(p, ".paddock/") {
		return fmt.Errorf("%q is under .paddock/, which Paddock keeps for itself", short(p))
	}
	return nil
}

// CheckPattern reports whether p is a valid pattern for Match: a path as
// CheckPath allows whose elements are path.Match patterns or "**". It
// mirrors job.CheckPattern.
func CheckPattern(p string) error {
	if err := CheckPath(p); err != nil {
		return err
	}
	for _, e := range strings.Split(p, "/") {
		if e == "**" {
			continue
		}
		// path.Match checks the syntax of the whole pattern, whatever the name.
		if _, err := path.Match(e, ""); err != nil {
			return fmt.Errorf("%q: element %q is not a valid pattern; use *, ?, [abc], [a-z], [^a-z] and \\ to escape", short(p), short(e))
		}
	}
	return nil
}

// Match reports whether name (a path as CheckPath allows) matches pattern:
// elements are matched one by one with path.Match, and an element "**"
// matches any number of elements, none included ("**/*.html" matches
// "a.html" and "x/y/a.html"; "out/**" matches everything under out). A
// malformed pattern matches nothing. Time is linear in the product of the
// element counts, whatever the number of "**".
func Match(pattern, name string) bool {
	pat := splitPattern(pattern)
	set := pat.start()
	for _, e := range strings.Split(name, "/") {
		if set, _ = pat.step(set, e); len(set) == 0 {
			return false
		}
	}
	return pat.accepts(set)
}

// A pattern is the elements of one pattern, run as a nondeterministic
// automaton: a state is the index of the next element to match, and
// len(pattern) means "matched in full".
type pattern []string

func splitPattern(p string) pattern { return strings.Split(p, "/") }

// start is the set of states before any element.
func (pat pattern) start() []int { return pat.closure(make([]bool, len(pat)+1), []int{0}) }

// step consumes one path element from the states in set. named tells
// whether an element other than "**" matched it on the way to a state that
// still needs more elements (the element was named, not just passed over).
func (pat pattern) step(set []int, elem string) (next []int, named bool) {
	mark := make([]bool, len(pat)+1)
	var moved []int
	for _, i := range set {
		if i == len(pat) {
			continue
		}
		if pat[i] == "**" {
			moved = append(moved, i)
			continue
		}
		if ok, err := path.Match(pat[i], elem); ok && err == nil {
			moved = append(moved, i+1)
			named = named || i+1 < len(pat)
		}
	}
	return pat.closure(mark, moved), named
}

// closure adds to set every state reachable by skipping "**" elements (a
// "**" may match no element at all); mark holds the states already in.
func (pat pattern) closure(mark []bool, set []int) []int {
	var out []int
	for len(set) > 0 {
		i := set[len(set)-1]
		set = set[:len(set)-1]
		if mark[i] {
			continue
		}
		mark[i] = true
		out = append(out, i)
		if i < len(pat) && pat[i] == "**" {
			set = append(set, i+1)
		}
	}
	return out
}

// accepts tells whether set holds the full match.
func (pat pattern) accepts(set []int) bool {
	for _, i := range set {
		if i == len(pat) {
			return true
		}
	}
	return false
}

// alive tells whether set holds a state that needs more elements: something
// below the path walked so far may still match.
func (pat pattern) alive(set []int) bool {
	for _, i := range set {
		if i < len(pat) {
			return true
		}
	}
	return false
}

// literals returns the elements that states in set need next, and false if
// one of them is "**" or holds a wildcard or an escape (the directory must
// then be listed, not looked up by name).
func (pat pattern) literals(set []int, into []string) ([]string, bool) {
	for _, i := range set {
		if i == len(pat) {
			continue
		}
		if pat[i] == "**" || strings.ContainsAny(pat[i], `*?[\`) {
			return nil, false
		}
		into = append(into, pat[i])
	}
	return into, true
}

// Printable returns p as it may be shown or logged: p itself when it is
// valid UTF-8 without control characters, else p quoted with Go escapes
// (strconv.Quote: "a\nb", "\xff.txt"), never the raw bytes.
func Printable(p string) string {
	if p == "" {
		return "."
	}
	if utf8.ValidString(p) && !strings.ContainsFunc(p, unicode.IsControl) {
		return p
	}
	return strconv.Quote(p)
}

// nameProblem says why an element of a walked path cannot be collected,
// or "".
func nameProblem(name string) string {
	switch {
	case !utf8.ValidString(name):
		return "name is not valid UTF-8"
	case strings.ContainsFunc(name, unicode.IsControl):
		return "name contains a control character (such as a newline)"
	}
	return ""
}

// short cuts s to about 60 bytes, on a rune boundary, for a message.
func short(s string) string {
	n := 60
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
