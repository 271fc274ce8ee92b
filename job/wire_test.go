package job

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// validPublishSubject follows nats-server's rules (server/sublist.go):
// non-empty tokens, no whitespace, no wildcard tokens.
func validPublishSubject(s string) bool {
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f") {
			return false
		}
	}
	return true
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"build-42":      "paddock.results.build-42",
		"build-42.test": "paddock.results.build-42.test", // usual ids are used as they are
		"a.b.c":         "paddock.results.a.b.c",
		".":             "paddock.results.~",
		"..":            "paddock.results.~~",
		".a":            "paddock.results.~a",
		"a.":            "paddock.results.a~",
		"a..b":          "paddock.results.a~~b",
		"":              "paddock.results.%",
		"*":             "paddock.results.%2A",
		">":             "paddock.results.%3E",
		"a b.c":         "paddock.results.a%20b~c",
		"~":             "paddock.results.%7E",
		"%":             "paddock.results.%25",
		"é":             "paddock.results.%C3%A9",
	}
	seen := map[string]string{}
	for id, want := range cases {
		got := ResultSubject(id)
		assert.Equal(t, want, got, id)
		assert.True(t, validPublishSubject(got), got)
		assert.Equal(t, "paddock.cancel."+strings.TrimPrefix(want, SubjectResultPrefix), CancelSubject(id))
		back, ok := IDFromResultSubject(got)
		assert.True(t, ok, got)
		assert.Equal(t, id, back)
		if prev, dup := seen[got]; dup {
			t.Errorf("ids %q and %q share subject %q", prev, id, got)
		}
		seen[got] = id
	}
	for _, s := range []string{"paddock.cancel.a", "paddock.results.", "paddock.results.a~b", "paddock.results.%zz", "paddock.results.%4", "paddock.results.%61"} {
		_, ok := IDFromResultSubject(s)
		assert.False(t, ok, "%s is not a canonical result subject", s)
	}
}

func FuzzResultSubject(f *testing.F) {
	for _, s := range []string{"", "a.b", "a~b", "%2E", "*", "> x", ".", "a..b", "é."} {
		f.Add(s, s+".")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := ResultSubject(a), ResultSubject(b)
		if !validPublishSubject(sa) {
			t.Fatalf("invalid subject for %q: %q", a, sa)
		}
		if a != b && sa == sb {
			t.Fatalf("%q and %q share subject %q", a, b, sa)
		}
		if id, ok := IDFromResultSubject(sa); !ok || id != a {
			t.Fatalf("IDFromResultSubject(%q) = %q, %v; want %q", sa, id, ok, a)
		}
		if ValidID(a) && !strings.HasPrefix(a, ".") && !strings.HasSuffix(a, ".") && !strings.Contains(a, "..") && sa != SubjectResultPrefix+a {
			t.Fatalf("usual id %q escaped to %q", a, sa)
		}
	})
}
