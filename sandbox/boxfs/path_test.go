package boxfs_test

import (
	"path"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox/boxfs"
)

var pathCases = []struct {
	p  string
	ok bool
}{
	{"a", true},
	{"a/b/c.txt", true},
	{".hidden/x", true},
	{"a.paddock/x", true},
	{"..a/b..", true},
	{"ünïcode/файл", true},
	{"", false},
	{"/etc/passwd", false},
	{"/", false},
	{"..", false},
	{"../x", false},
	{"a/../../x", false},
	{"a/..", false},
	{".", false},
	{"./a", false},
	{"a/./b", false},
	{"a//b", false},
	{"a/", false},
	{"a\nb", false},
	{"a\x00b", false},
	{"a\tb", false},
	{"a\x7fb", false},
	{"a\u0085b", false}, // NEL, a C1 control
	{"\xff.txt", false},
	{".paddock", false},
	{".paddock/spill", false},
	{strings.Repeat("a", 255), true},
	{strings.Repeat("a", 256), false},
	{strings.Repeat("a/", 512)[:1023], true},
	{strings.Repeat("a/", 513)[:1025], false},
}

func TestCheckPath(t *testing.T) {
	t.Parallel()
	for _, c := range pathCases {
		err := boxfs.CheckPath(c.p)
		if c.ok {
			assert.NoError(t, err, "%q", c.p)
		} else {
			assert.Error(t, err, "%q", c.p)
		}
		// The mirror of job.CheckPath: the worker validated the spec with
		// that one, init checks again with this one.
		assert.Equal(t, job.CheckPath(c.p) == nil, err == nil, "%q: boxfs and job disagree", c.p)
	}
}

func TestCheckPattern(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"*.html", "**", "**/*.log", "out/**", "a/[bc]/?.txt", `a\*b`} {
		assert.NoError(t, boxfs.CheckPattern(p), p)
		assert.NoError(t, job.CheckPattern(p), p)
	}
	for _, p := range []string{"../*", "/x/*", "a/[b", `a\`, "a\n*", "[a-]", "[]a]x[", "[^]", ".paddock/*"} {
		assert.Error(t, boxfs.CheckPattern(p), p)
		assert.Error(t, job.CheckPattern(p), p)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pat, name string
		want      bool
	}{
		{"report.html", "report.html", true},
		{"report.html", "x/report.html", false},
		{"*.html", "a.html", true},
		{"*.html", "d/a.html", false},
		{"**/*.html", "a.html", true},
		{"**/*.html", "d/e/f/a.html", true},
		{"**/*.html", "d/e/f/a.txt", false},
		{"out/**", "out/a", true},
		{"out/**", "out/a/b/c", true},
		{"out/**", "other/a", false},
		{"**", "anything/at/all", true},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"a/**/**/b", "a/b", true},
		{"a/*/b", "a/x/b", true},
		{"a/*/b", "a/x/y/b", false},
		{"a/?/b", "a/xy/b", false},
		{"[ab]/c", "b/c", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"[", "[", false}, // malformed: matches nothing
	} {
		assert.Equal(t, c.want, boxfs.Match(c.pat, c.name), "Match(%q, %q)", c.pat, c.name)
	}
}

// Many "**" must not make matching exponential.
func TestMatchManyStars(t *testing.T) {
	t.Parallel()
	pat := strings.Repeat("**/", 300) + "z"
	name := strings.Repeat("a/", 400) + "y"
	within(t, 2e9, func() { assert.False(t, boxfs.Match(pat, name)) })
}

func FuzzCheckPath(f *testing.F) {
	for _, c := range pathCases {
		f.Add(c.p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := boxfs.CheckPath(p)
		if (job.CheckPath(p) == nil) != (err == nil) {
			t.Fatalf("%q: boxfs says %v, job says %v", p, err, job.CheckPath(p))
		}
		if err != nil {
			return
		}
		if !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl) || path.IsAbs(p) ||
			path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == ".." ||
			strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") || strings.HasPrefix(p, ".paddock/") {
			t.Fatalf("%q accepted", p)
		}
		if boxfs.Printable(p) != p {
			t.Fatalf("%q: a valid path must print as itself, got %q", p, boxfs.Printable(p))
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("**/*.html", "a/b/c.html")
	f.Add("a/*/b", "a/x/b")
	f.Add("[a-", "a")
	f.Add(`a\`, "a")
	f.Add("**/**/**", "x")
	f.Fuzz(func(t *testing.T, pat, name string) {
		got := boxfs.Match(pat, name) // must not panic, must end
		if (boxfs.CheckPattern(pat) == nil) != (job.CheckPattern(pat) == nil) {
			t.Fatalf("%q: boxfs says %v, job says %v", pat, boxfs.CheckPattern(pat), job.CheckPattern(pat))
		}
		if boxfs.CheckPath(name) != nil || boxfs.CheckPattern(pat) != nil {
			return
		}
		if !strings.ContainsAny(pat, `*?[\`) && got != (pat == name) {
			t.Fatalf("literal Match(%q, %q) = %v", pat, name, got)
		}
		if !boxfs.Match("**", name) {
			t.Fatalf("%q does not match **", name)
		}
		if !strings.ContainsAny(name, `*?[\`) && !boxfs.Match(name, name) {
			t.Fatalf("%q does not match itself", name)
		}
		// Without "**", Match is path.Match element by element.
		if !strings.Contains(pat, "**") {
			want, _ := path.Match(pat, name)
			if got != want {
				t.Fatalf("Match(%q, %q) = %v, path.Match says %v", pat, name, got, want)
			}
		}
	})
}
