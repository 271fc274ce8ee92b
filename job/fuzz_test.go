package job

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
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
