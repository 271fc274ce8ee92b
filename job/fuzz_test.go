package job

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzDecode checks Decode+Validate on arbitrary documents: no panic; every
// error wraps ErrInvalid and names at least one field; an accepted spec is
// also accepted by spec.schema.json, re-encodes to a document that decodes
// to an equal value with equal Effective limits, and stays valid after
// Normalize.
func FuzzDecode(f *testing.F) {
	for _, doc := range acceptedDocs {
		if len(doc) <= 1024 { // big documents make minimization crawl; unit tests cover them
			f.Add([]byte(doc))
		}
	}
	for _, doc := range []string{
		``, `null`, `[]`, `{}`, `{"command":""}`, `{"command":"x"}{}`, `{"command":"x",}`,
		`{"Command":"x"}`, `{"command":"x","command":"y"}`, `{"command":"x","env":{"A":"1","A":"2"}}`,
		`{"command":"\u0000"}`, `{"command":"\ud800"}`, "{\"command\":\"\xff\"}", "{\"command\":\"a\x00\"}",
		`{"command":"x","limits":{"memory_mb":0,"cpus":-1,"pids":1e3,"command_timeout_s":99999999999999999999}}`,
		`{"command":"x","limits":{"command_timeout_s":60,"job_timeout_s":30}}`,
		`{"command":"x","env":{"PATH":"/","LD_PRELOAD":"x","1A":"y"}}`,
		`{"command":"x","volume":{"name":"../etc","mode":"rwx"},"heal":{"mode":"god","max_attempts":99}}`,
		`{"command":"x","submitted_at":"9999-12-31T23:59:59-23:59"}`,
		`{"command":"x","submitted_at":"0000-01-01T00:00:00+23:59"}`,
		`{"command":"x","submitted_at":"2026-01-01T00:00:00+00:00"}`,
		`{"command":"x","labels":{"a/b":"\u2028"},"junk":[[[{"a":[1,{}]}]]]}`,
		`{"command":"x","files":[{"path":"a","content_b64":"eA==","mode":"0755"},{"path":"a/b","ref":"r"},null,{"path":"../x","ref":"/r","content_b64":"!"}]}`,
		`{"command":"x","files":"a","artifacts":[1,"/x","[","**/*.log"],"stdin":"\u0000","output":{"keep":null}}`,
		`{"command":"x","files":[{"path":".paddock/x","mode":"4755"},{"path":"a\nb","mode":"00644"},{"Path":"c"}],"output":{"kept":1}}`,
		`{"command":"x","volume":{"name":"v","mode":"ro"},"files":[{"path":"a"}],"output":{"keep":true}}`,
	} {
		f.Add([]byte(doc))
	}
	schema := loadSchema(f, SpecSchema)

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		eff, err := Validate(&s, fuzzCaps)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		if errs := validateSchema(schema, data); len(errs) > 0 {
			t.Fatalf("Go accepts a document the schema rejects: %q\n%v", data, errs)
		}
		s2 := roundTrip(t, s)
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the spec:\n%#v\n%#v", s, s2)
		}
		eff2, err := Validate(&s2, fuzzCaps)
		if err != nil || eff2 != eff {
			t.Fatalf("round trip changed validation: %v %+v %+v", err, eff, eff2)
		}
		Normalize(&s2, fuzzCaps)
		s3 := roundTrip(t, s2)
		if eff3, err := Validate(&s3, fuzzCaps); err != nil || eff3 != eff {
			t.Fatalf("normalized spec no longer valid: %v", err)
		}
		var e Effective
		b, err := json.Marshal(eff)
		if err != nil || json.Unmarshal(b, &e) != nil || e != eff {
			t.Fatalf("effective limits do not round-trip: %s %v", b, err)
		}
	})
}

func roundTrip(t *testing.T, s Spec) Spec {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("accepted spec does not encode: %v", err)
	}
	s2, err := Decode(b)
	if err != nil {
		t.Fatalf("re-encoded spec does not decode: %v\n%s", err, b)
	}
	return s2
}

func checkInvalid(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("error does not wrap ErrInvalid: %v", err)
	}
	fes := FieldErrors(err)
	if len(fes) == 0 {
		t.Fatalf("no field errors: %v", err)
	}
	for _, fe := range fes {
		if fe.Field == "" || fe.Message == "" {
			t.Fatalf("empty field error %+v in %v", fe, err)
		}
	}
}

// FuzzCheckPath checks that CheckPath never accepts a path that could
// leave the workspace or name something other than what it says: no "..",
// "." or empty element, nothing absolute, no control character, valid
// UTF-8, within the sizes, not under .paddock, and already clean. A path it
// accepts without wildcard characters is also a valid artifact pattern.
func FuzzCheckPath(f *testing.F) {
	for _, c := range pathCases() {
		f.Add(c.in)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p) != nil {
			if CheckPattern(p) == nil {
				t.Fatalf("CheckPattern accepts %q, which CheckPath refuses", p)
			}
			return
		}
		switch {
		case !utf8.ValidString(p):
			t.Fatalf("accepted invalid UTF-8 %q", p)
		case p == "" || strings.HasPrefix(p, "/") || len(p) > MaxPathBytes:
			t.Fatalf("accepted empty, absolute or long path %q", p)
		case strings.ContainsFunc(p, unicode.IsControl):
			t.Fatalf("accepted a control character in %q", p)
		case path.Clean(p) != p:
			t.Fatalf("accepted unclean %q (clean: %q)", p, path.Clean(p))
		case !strings.HasPrefix(path.Join("/workspace", p), "/workspace/"):
			t.Fatalf("%q leaves the workspace", p)
		case p == ".paddock" || strings.HasPrefix(p, ".paddock/"):
			t.Fatalf("accepted %q under .paddock", p)
		}
		for _, e := range strings.Split(p, "/") {
			if e == "" || e == "." || e == ".." || len(e) > MaxPathElem {
				t.Fatalf("accepted element %q of %q", e, p)
			}
		}
		if !strings.ContainsAny(p, `*?[\`) {
			if err := CheckPattern(p); err != nil {
				t.Fatalf("a plain path %q is not a valid pattern: %v", p, err)
			}
		}
	})
}

// FuzzCheckPattern checks that every pattern CheckPattern accepts is a
// path CheckPath accepts whose elements path.Match accepts (the collector
// never meets a syntax error), and that CheckPattern never panics.
func FuzzCheckPattern(f *testing.F) {
	for _, c := range append(patternCases(), pathCases()...) {
		f.Add(c.in, "x")
	}
	f.Fuzz(func(t *testing.T, p, name string) {
		if CheckPattern(p) != nil {
			return
		}
		if err := CheckPath(p); err != nil {
			t.Fatalf("pattern %q is not a valid path: %v", p, err)
		}
		for _, e := range strings.Split(p, "/") {
			if _, err := path.Match(e, name); err != nil && e != "**" {
				t.Fatalf("element %q of accepted pattern %q: %v", e, p, err)
			}
		}
	})
}

// FuzzParseModeAndRef checks ParseMode and CheckRef against the spec
// schema's patterns for mode and ref: the same strings are accepted, and
// an accepted mode is owner-readable plain permission bits.
func FuzzParseModeAndRef(f *testing.F) {
	for _, c := range append(modeCases(), refCases()...) {
		f.Add(c.in)
	}
	schema := loadSchema(f, SpecSchema)
	file := resolve(schema, resolve(schema, sub(f, schema, schema, "files"))["items"].(schemaNode))
	modeRE := regexp.MustCompile(sub(f, schema, file, "mode")["pattern"].(string))
	ref := sub(f, schema, file, "ref")
	refRE := regexp.MustCompile(ref["pattern"].(string))
	refNot := regexp.MustCompile(ref["not"].(schemaNode)["pattern"].(string))
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if (err == nil) != modeRE.MatchString(s) {
			t.Fatalf("ParseMode(%q) = %o, %v; schema pattern match %v", s, m, err, modeRE.MatchString(s))
		}
		if err == nil && (m > 0o777 || m&0o400 == 0) {
			t.Fatalf("ParseMode(%q) = %o", s, m)
		}
		if s == "" {
			return // an empty ref means an inline file; checkIO never asks
		}
		okSchema := refRE.MatchString(s) && !refNot.MatchString(s)
		if err := CheckRef(s); (err == nil) != okSchema {
			t.Fatalf("CheckRef(%q) = %v; schema says %v", s, err, okSchema)
		}
	})
}
