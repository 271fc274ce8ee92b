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
		"build-42":      "paddock.results.t.build-42",
		"build-42.test": "paddock.results.t.build-42.test", // usual ids are used as they are
		"a.b.c":         "paddock.results.t.a.b.c",
		".":             "paddock.results.t.~",
		"..":            "paddock.results.t.~~",
		".a":            "paddock.results.t.~a",
		"a.":            "paddock.results.t.a~",
		"a..b":          "paddock.results.t.a~~b",
		"":              "paddock.results.t.%",
		"*":             "paddock.results.t.%2A",
		">":             "paddock.results.t.%3E",
		"a b.c":         "paddock.results.t.a%20b~c",
		"~":             "paddock.results.t.%7E",
		"%":             "paddock.results.t.%25",
		"é":             "paddock.results.t.%C3%A9",
	}
	seen := map[string]string{}
	for id, want := range cases {
		got := ResultSubject("t", id)
		assert.Equal(t, want, got, id)
		assert.True(t, validPublishSubject(got), got)
		assert.Equal(t, "paddock.cancel."+strings.TrimPrefix(want, SubjectResultPrefix+"t."), CancelSubject(id))
		tenant, back, ok := ParseResultSubject(got)
		assert.True(t, ok, got)
		assert.Equal(t, id, back)
		assert.Equal(t, "t", tenant)
		if prev, dup := seen[got]; dup {
			t.Errorf("ids %q and %q share subject %q", prev, id, got)
		}
		seen[got] = id
	}
	for _, s := range []string{"paddock.cancel.a", "paddock.results.t.", "paddock.results.t.a~b", "paddock.results.t.%zz", "paddock.results.t.%4", "paddock.results.t.%61",
		"paddock.results.a", "paddock.results.Bad.a", "paddock.results..a"} {
		_, _, ok := ParseResultSubject(s)
		assert.False(t, ok, "%s is not a canonical result subject", s)
	}
}

func FuzzResultSubject(f *testing.F) {
	for _, s := range []string{"", "a.b", "a~b", "%2E", "*", "> x", ".", "a..b", "é."} {
		f.Add(s, s+".")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := ResultSubject("acme", a), ResultSubject("acme", b)
		if !validPublishSubject(sa) {
			t.Fatalf("invalid subject for %q: %q", a, sa)
		}
		if a != b && sa == sb {
			t.Fatalf("%q and %q share subject %q", a, b, sa)
		}
		if tenant, id, ok := ParseResultSubject(sa); !ok || id != a || tenant != "acme" {
			t.Fatalf("ParseResultSubject(%q) = %q, %q, %v; want acme, %q", sa, tenant, id, ok, a)
		}
		if ValidID(a) && !strings.HasPrefix(a, ".") && !strings.HasSuffix(a, ".") && !strings.Contains(a, "..") && sa != SubjectResultPrefix+"acme."+a {
			t.Fatalf("usual id %q escaped to %q", a, sa)
		}
	})
}

func TestTenantNamesAndKeys(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"dev", "a", "team-7", "x" + strings.Repeat("y", 31)} {
		assert.NoError(t, CheckTenant(ok), ok)
	}
	for _, bad := range []string{"", "Dev", "7up", "-a", "a-", "a.b", "a*", "a>", "a b", "a/b", "x" + strings.Repeat("y", 32)} {
		assert.ErrorIs(t, CheckTenant(bad), ErrInvalidTenant, bad)
	}
	assert.Equal(t, "paddock.jobs.submit.dev", SubmitSubject("dev"))
	assert.Equal(t, "PADDOCK_JOBS_dev", JobsStream("dev"))
	tn, ok := TenantFromSubmitSubject("paddock.jobs.submit.dev")
	assert.True(t, ok)
	assert.Equal(t, "dev", tn)
	for _, s := range []string{"paddock.jobs.submit", "paddock.jobs.submit.", "paddock.jobs.submit.a.b", "paddock.jobs.submit.A"} {
		_, ok := TenantFromSubmitSubject(s)
		assert.False(t, ok, s)
	}
	tn, ok = TenantFromCancelSubject(CancelRequestSubject("acme"))
	assert.True(t, ok)
	assert.Equal(t, "acme", tn)
	assert.Equal(t, "_INBOX.acme", InboxPrefix("acme"))
	assert.Equal(t, "paddock.results.acme.>", ResultSubjects("acme"))

	// Two tenants may share an id; their keys differ, and split back.
	a, b := Spec{Tenant: "a", ID: "build-1"}, Spec{Tenant: "b", ID: "build-1"}
	assert.NotEqual(t, a.Key(), b.Key())
	tn, id, ok := SplitKey(a.Key())
	assert.True(t, ok)
	assert.Equal(t, []string{"a", "build-1"}, []string{tn, id})
	assert.Equal(t, "default/x", (&Spec{ID: "x"}).Key(), "no tenant: DefaultTenant")
	assert.Equal(t, "paddock.results.default.x", ResultSubject("", "x"))
	r := Result{Tenant: "a", ID: "build-1"}
	assert.Equal(t, a.Key(), r.Key())
}
