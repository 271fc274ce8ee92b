package job

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		doc   string
		field string
		msg   string
	}{
		// document
		{"empty", ``, "spec", "document is empty; expected a JSON object"},
		{"blank", " \n\t", "spec", "document is empty"},
		{"oversize", `{"command":"` + strings.Repeat("x", MaxSpecBytes) + `"}`, "spec", "at most 262144 allowed"},
		{"raw NUL", "{\"command\":\"a\x00\"}", "spec", "document contains a NUL byte (at byte 13)"},
		{"raw NUL outside string", "{\x00\"command\":\"a\"}", "spec", "NUL byte (at byte 1)"},
		{"invalid UTF-8", "{\"command\":\"a\xff\"}", "spec", "document is not valid UTF-8 (at byte 13)"},
		{"overlong UTF-8", "{\"command\":\"\xc0\xaf\"}", "spec", "not valid UTF-8"},
		{"raw surrogate UTF-8", "{\"command\":\"\xed\xa0\x80\"}", "spec", "not valid UTF-8"},
		{"array", `[]`, "spec", "expected an object, got an array"},
		{"string", `"echo hi"`, "spec", "expected an object, got a string"},
		{"number", `1`, "spec", "expected an object, got a number"},
		{"null", `null`, "spec", "null is not allowed"},
		{"malformed", `{"command":`, "spec", "malformed JSON at byte 11: unexpected end of document"},
		{"missing colon", `{"command" "x"}`, "spec", "malformed JSON at byte 11"},
		{"single quotes", `{'command':'x'}`, "spec", "malformed JSON"},
		{"trailing comma", `{"command":"x",}`, "spec", "malformed JSON"},
		{"trailing object", `{"command":"x"}{}`, "spec", "trailing data after the JSON object (at byte 15)"},
		{"trailing after space", "{\"command\":\"x\"} \n {}", "spec", "trailing data after the JSON object (at byte 18)"},
		{"trailing brace", `{"command":"x"}}`, "spec", "trailing data"},
		{"trailing word", `{"command":"x"} rm -rf /`, "spec", "trailing data"},
		{"bom", "\uFEFF{\"command\":\"x\"}", "spec", "malformed JSON at byte"},

		// keys
		{"unknown", `{"command":"x","cmd":"y"}`, "cmd", "unknown field; spec allows: v, id, command, image, env, workdir, limits, queue, labels, heal, volume, files, stdin, output, artifacts, grants, tenant, submitted_at"},
		{"unknown nested", `{"command":"x","limits":{"memory":1}}`, "limits.memory", "unknown field; limits allows: memory_mb, cpus, pids, command_timeout_s, job_timeout_s, output_bytes, tmpfs_mb"},
		{"unknown heal", `{"command":"x","heal":{"retries":1}}`, "heal.retries", "heal allows: mode, max_attempts, allow_install, retry_resource_kills"},
		{"unknown volume", `{"command":"x","volume":{"name":"v","path":"/"}}`, "volume.path", "volume allows: name, mode"},
		{"case variant", `{"Command":"x"}`, "Command", `did you mean "command"? (names are exact and case-sensitive)`},
		{"case variant nested", `{"command":"x","limits":{"MEMORY_MB":1}}`, "limits.MEMORY_MB", `did you mean "memory_mb"?`},
		{"unicode fold variant", `{"command":"x","ſubmitted_at":"2026-01-01T00:00:00Z"}`, `"ſubmitted_at"`, "unknown field"},
		{"go field name", `{"command":"x","SubmittedAt":"2026-01-01T00:00:00Z"}`, "SubmittedAt", `did you mean "submitted_at"?`},
		{"duplicate", `{"command":"x","command":"rm -rf /"}`, "command", "duplicate key"},
		{"duplicate case", `{"command":"x","Command":"y"}`, "Command", "did you mean"},
		{"duplicate env", `{"command":"x","env":{"A":"1","A":"2"}}`, "env.A", "duplicate key"},
		{"duplicate nested", `{"command":"x","limits":{"pids":1,"pids":2}}`, "limits.pids", "duplicate key"},
		{"odd key quoted", `{"command":"x","a b":1}`, `"a b"`, "unknown field"},

		// null
		{"null command", `{"command":null}`, "command", "null is not allowed; omit the field to take its default"},
		{"null limit", `{"command":"x","limits":{"memory_mb":null}}`, "limits.memory_mb", "null is not allowed"},
		{"null env value", `{"command":"x","env":{"A":null}}`, "env.A", "null is not allowed"},
		{"null heal", `{"command":"x","heal":null}`, "heal", "null is not allowed"},

		// types, with the full dotted path
		{"command number", `{"command":1}`, "command", "expected a string, got a number"},
		{"command object", `{"command":{"sh":"x"}}`, "command", "expected a string, got an object"},
		{"v string", `{"command":"x","v":"1"}`, "v", "expected an integer, got a string"},
		{"v fraction", `{"command":"x","v":1.0}`, "v", "1.0 is not an integer; write whole numbers without fraction or exponent"},
		{"memory string", `{"command":"x","limits":{"memory_mb":"512"}}`, "limits.memory_mb", "expected an integer, got a string"},
		{"memory exponent", `{"command":"x","limits":{"memory_mb":5e2}}`, "limits.memory_mb", "5e2 is not an integer"},
		{"memory overflow", `{"command":"x","limits":{"memory_mb":99999999999999999999}}`, "limits.memory_mb", "does not fit in a 64-bit integer"},
		{"memory bool", `{"command":"x","limits":{"memory_mb":true}}`, "limits.memory_mb", "expected an integer, got a boolean"},
		{"cpus string", `{"command":"x","limits":{"cpus":"1"}}`, "limits.cpus", "expected a number, got a string"},
		{"cpus overflow", `{"command":"x","limits":{"cpus":1e309}}`, "limits.cpus", "1e309 is out of range for a number"},
		{"limits array", `{"command":"x","limits":[1]}`, "limits", "expected an object, got an array"},
		{"heal attempts", `{"command":"x","heal":{"max_attempts":"3"}}`, "heal.max_attempts", "expected an integer"},
		{"heal mode", `{"command":"x","heal":{"mode":1}}`, "heal.mode", "expected a string"},
		{"volume", `{"command":"x","volume":"cache"}`, "volume", "expected an object, got a string"},
		{"labels value", `{"command":"x","labels":{"k":false}}`, "labels.k", "expected a string, got a boolean"},
		{"submitted_at number", `{"command":"x","submitted_at":5}`, "submitted_at", "expected an RFC 3339 time string"},
		{"submitted_at format", `{"command":"x","submitted_at":"2026-01-01 00:00:00"}`, "submitted_at", `"2026-01-01 00:00:00" is not an RFC 3339 time string`},
		{"submitted_at NUL", `{"command":"x","submitted_at":"2026-01-01T00:00:00Z\u0000"}`, "submitted_at", "NUL"},
		{"submitted_at year", `{"command":"x","submitted_at":"9999-12-31T23:00:00-02:00"}`, "submitted_at", "outside years 0000..9999 UTC"},

		// arrays (files, artifacts): elements are checked like fields, at path[i]
		{"files string", `{"command":"x","files":"x"}`, "files", "expected an array, got a string"},
		{"files object", `{"command":"x","files":{"path":"a"}}`, "files", "expected an array, got an object"},
		{"files null", `{"command":"x","files":null}`, "files", "null is not allowed"},
		{"file path number", `{"command":"x","files":[{"path":1}]}`, "files[0].path", "expected a string, got a number"},
		{"second file path", `{"command":"x","files":[{"path":"a"},{"path":["b"]}]}`, "files[1].path", "expected a string, got an array"},
		{"file null", `{"command":"x","files":[null]}`, "files[0]", "null is not allowed; omit the field to take its default"},
		{"file null after one", `{"command":"x","files":[{"path":"a"},null]}`, "files[1]", "null is not allowed"},
		{"file string", `{"command":"x","files":["a"]}`, "files[0]", "expected an object, got a string"},
		{"file unknown key", `{"command":"x","files":[{"path":"a","data":"x"}]}`, "files[0].data", "unknown field; files[0] allows: path, content_b64, ref, mode"},
		{"file case variant", `{"command":"x","files":[{"Path":"a"}]}`, "files[0].Path", `did you mean "path"?`},
		{"file content variant", `{"command":"x","files":[{"path":"a","contentB64":"eA=="}]}`, "files[0].contentB64", `did you mean "content_b64"?`},
		{"file duplicate key", `{"command":"x","files":[{"path":"a","path":"b"}]}`, "files[0].path", "duplicate key"},
		{"file mode number", `{"command":"x","files":[{"path":"a","mode":644}]}`, "files[0].mode", "expected a string, got a number"},
		{"file NUL in path", `{"command":"x","files":[{"path":"a\u0000"}]}`, "files[0].path", `contains a NUL character (\u0000)`},
		{"file lone surrogate", `{"command":"x","files":[{"path":"\ud800"}]}`, "files[0].path", "lone UTF-16 surrogate"},
		{"files malformed", `{"command":"x","files":[{"path":"a"},]}`, "spec", "malformed JSON"},
		{"files unclosed", `{"command":"x","files":[`, "spec", "unexpected end of document"},
		{"artifacts string", `{"command":"x","artifacts":"out/*"}`, "artifacts", "expected an array, got a string"},
		{"artifact number", `{"command":"x","artifacts":["a",2]}`, "artifacts[1]", "expected a string, got a number"},
		{"artifact null", `{"command":"x","artifacts":[null]}`, "artifacts[0]", "null is not allowed"},
		{"artifact nested array", `{"command":"x","artifacts":[["a"]]}`, "artifacts[0]", "expected a string, got an array"},
		{"stdin number", `{"command":"x","stdin":1}`, "stdin", "expected a string, got a number"},
		{"stdin NUL", `{"command":"x","stdin":"a\u0000"}`, "stdin", "NUL"},
		{"output bool", `{"command":"x","output":true}`, "output", "expected an object, got a boolean"},
		{"output keep string", `{"command":"x","output":{"keep":"yes"}}`, "output.keep", "expected true or false, got a string"},
		{"output keep null", `{"command":"x","output":{"keep":null}}`, "output.keep", "null is not allowed"},
		{"output unknown", `{"command":"x","output":{"kept":true}}`, "output.kept", "unknown field; output allows: keep"},

		// escapes that would change the command silently
		{"escaped NUL", `{"command":"a\u0000b"}`, "command", `contains a NUL character (\u0000)`},
		{"escaped NUL key", `{"command":"x","labels":{"k\u0000":"v"}}`, `labels."k\x00"`, "NUL"},
		{"lone high surrogate", `{"command":"\ud800"}`, "command", "escaped lone UTF-16 surrogate"},
		{"lone low surrogate", `{"command":"\udc00"}`, "command", "lone UTF-16 surrogate"},
		{"high then letter", `{"command":"\ud800\u0041"}`, "command", "lone UTF-16 surrogate"},
		{"high high", `{"command":"\uD800\uDBFF"}`, "command", "lone UTF-16 surrogate"},
		{"surrogate in env key", `{"command":"x","env":{"\udfff":"x"}}`, "env.\"\uFFFD\"", "lone UTF-16 surrogate"},
		{"surrogate in id", `{"command":"x","id":"\ud800"}`, "id", "lone UTF-16 surrogate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Decode([]byte(tc.doc))
			require.Error(t, err)
			assert.Equal(t, Spec{}, s, "no half-decoded spec")
			assert.ErrorIs(t, err, ErrInvalid)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			assertFieldError(t, ve.Fields, tc.field, tc.msg)
		})
	}
}

func TestDecodeReportsEveryStructuralError(t *testing.T) {
	t.Parallel()
	_, err := Decode([]byte(`{"cmd":"x","command":1,"limits":{"memory_mb":"1","cpus":true},"env":{"A":[{"deep":[1,2]}],"B":"ok"},"heal":{"mode":"llm","x":{}}}`))
	require.ErrorIs(t, err, ErrInvalid)
	var fields []string
	for _, fe := range FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	assert.Equal(t, []string{"cmd", "command", "limits.memory_mb", "limits.cpus", "env.A", "heal.x"}, fields)

	// One error per bad value, and the walk goes on after it.
	_, err = Decode([]byte(`{"command":"x","submitted_at":"\u0000","labels":{"k":1}}`))
	assert.Equal(t, []FieldError{
		{Field: "submitted_at", Message: `contains a NUL character (\u0000)`},
		{Field: "labels.k", Message: "expected a string, got a number"},
	}, FieldErrors(err))
}

func TestDecodeStopsAfterTooManyErrors(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"command":"x"`)
	for i := range 100 {
		b.WriteString(`,"k` + strings.Repeat("x", i) + `":1`)
	}
	b.WriteString("}")
	_, err := Decode([]byte(b.String()))
	errs := FieldErrors(err)
	require.Len(t, errs, maxDecodeErrors+1)
	assert.Equal(t, FieldError{Field: "spec", Message: "more than 20 errors; stopped"}, errs[maxDecodeErrors])
}

func TestDecodeDeepNesting(t *testing.T) {
	t.Parallel()
	depth := (MaxSpecBytes - 100) / 2
	doc := `{"command":"x","junk":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	_, err := Decode([]byte(doc))
	assertFieldError(t, FieldErrors(err), "junk", "unknown field")
	doc = `{"command":"x","env":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	_, err = Decode([]byte(doc))
	assertFieldError(t, FieldErrors(err), "env", "expected an object, got an array")
}

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	s, err := Decode([]byte(acceptedDocs[4]))
	require.NoError(t, err)
	assert.Equal(t, Spec{
		Command: "make test", Image: DefaultImage, Queue: DefaultQueue, Workdir: "/workspace/src",
		Limits: Limits{MemoryMB: i64(1024), CPUs: f64(1.5), Pids: i64(128), CommandTimeoutS: i64(60),
			JobTimeoutS: i64(600), OutputBytes: i64(65536), TmpfsMB: i64(128)},
		Heal:        &HealPolicy{Mode: HealLLM, MaxAttempts: 3, AllowInstall: true, RetryResourceKills: true},
		Volume:      &Volume{Name: "cache.v1", Mode: VolumeRO},
		SubmittedAt: time.Date(2026, 1, 2, 1, 4, 5, 123456789, time.UTC),
	}, s)
	assert.Equal(t, time.UTC, s.SubmittedAt.Location(), "stored in UTC")

	// Empty maps decode to nil so that the spec re-encodes to an equal value.
	s, err = Decode([]byte(`{"command":"x","env":{},"labels":{},"limits":{},"heal":{}}`))
	require.NoError(t, err)
	assert.Nil(t, s.Env)
	assert.Nil(t, s.Labels)
	assert.Equal(t, Limits{}, s.Limits)
	assert.Equal(t, &HealPolicy{}, s.Heal)

	// Empty arrays decode to nil too; an empty output object stays.
	s, err = Decode([]byte(`{"command":"x","files":[],"artifacts":[],"output":{}}`))
	require.NoError(t, err)
	assert.Nil(t, s.Files)
	assert.Nil(t, s.Artifacts)
	assert.Equal(t, &OutputPolicy{}, s.Output)

	// Agent I/O fields decode as written, in order.
	keep := true
	s, err = Decode([]byte(`{"command":"x","files":[{"path":"a/b.sh","content_b64":"eA==","mode":"0755"},{"path":"c","ref":"up/c"}],
		"stdin":"yes\n","output":{"keep":true},"artifacts":["out/*.xml","**/*.log"]}`))
	require.NoError(t, err)
	assert.Equal(t, []File{{Path: "a/b.sh", ContentB64: "eA==", Mode: "0755"}, {Path: "c", Ref: "up/c"}}, s.Files)
	assert.Equal(t, "yes\n", s.Stdin)
	assert.Equal(t, &OutputPolicy{Keep: &keep}, s.Output)
	assert.Equal(t, []string{"out/*.xml", "**/*.log"}, s.Artifacts)

	// Escapes that are valid Unicode decode as written.
	s, err = Decode([]byte(`{"command":"echo \"\ud83d\ude00\" \\ud800 \ufffd \u00e9 \/"}`))
	require.NoError(t, err)
	assert.Equal(t, "echo \"😀\" \\ud800 \uFFFD é /", s.Command)

	// Exactly MaxSpecBytes is allowed.
	doc := `{"command":"x"}`
	doc += strings.Repeat(" ", MaxSpecBytes-len(doc))
	_, err = Decode([]byte(doc))
	require.NoError(t, err)
}

func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, doc := range acceptedDocs {
		s, err := Decode([]byte(doc))
		require.NoError(t, err)
		b, err := json.Marshal(s)
		require.NoError(t, err)
		s2, err := Decode(b)
		require.NoError(t, err, string(b))
		assert.Equal(t, s, s2)
	}
}

// The walk goes on after a bad element, and stops after maxDecodeErrors.
func TestDecodeArrayErrors(t *testing.T) {
	t.Parallel()
	_, err := Decode([]byte(`{"command":"x","files":[{"path":1},{"path":"ok"},{"mode":2,"x":3}],"artifacts":[1,"a",null]}`))
	assert.Equal(t, []FieldError{
		{Field: "files[0].path", Message: "expected a string, got a number"},
		{Field: "files[2].mode", Message: "expected a string, got a number"},
		{Field: "files[2].x", Message: "unknown field; files[2] allows: path, content_b64, ref, mode"},
		{Field: "artifacts[0]", Message: "expected a string, got a number"},
		{Field: "artifacts[2]", Message: "null is not allowed; omit the field to take its default"},
	}, FieldErrors(err))

	var b strings.Builder
	b.WriteString(`{"command":"x","artifacts":[1`)
	for range 100 {
		b.WriteString(`,1`)
	}
	b.WriteString(`]}`)
	_, err = Decode([]byte(b.String()))
	errs := FieldErrors(err)
	require.Len(t, errs, maxDecodeErrors+1)
	assert.Equal(t, "artifacts[19]", errs[maxDecodeErrors-1].Field)
	assert.Equal(t, FieldError{Field: "spec", Message: "more than 20 errors; stopped"}, errs[maxDecodeErrors])

	// A deeply nested array where a file is expected is skipped, not recursed into.
	depth := (MaxSpecBytes - 100) / 2
	_, err = Decode([]byte(`{"command":"x","files":[` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `]}`))
	assert.Equal(t, []FieldError{{Field: "files[0]", Message: "expected an object, got an array"}}, FieldErrors(err))
}

func TestHasLoneSurrogate(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		`"\ud800"`:         true,
		`"\uDC00"`:         true,
		`"\ud800x"`:        true,
		`"\ud800\n"`:       true,
		`"\ud800\ud800"`:   true,
		`"\ud83d\ude00"`:   false,
		`"\\ud800"`:        false,
		`"\\\ud800"`:       true,
		`"\u00e9\ufffd"`:   false,
		`"\ud8"`:           false, // not a complete escape (malformed JSON is caught elsewhere)
		`: "\udbff\udfff"`: false,
	} {
		assert.Equal(t, want, hasLoneSurrogate([]byte(raw)), raw)
	}
}

func BenchmarkDecodeValidate(b *testing.B) {
	for _, bc := range []struct {
		name string
		doc  string
	}{
		{"minimal", acceptedDocs[0]},
		{"full", acceptedDocs[4]},
		{"64KiB-command", acceptedDocs[len(acceptedDocs)-1]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			for b.Loop() {
				s, err := Decode([]byte(bc.doc))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Validate(&s, fuzzCaps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
