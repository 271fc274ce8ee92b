package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schemaNode is a parsed JSON Schema (draft 2020-12), as
// jsonschema.UnmarshalJSON would give it (numbers as json.Number). The
// schemas keep to the keywords assertKnownKeywords lists, so that what they
// say stays simple to read against the Go rules.
type schemaNode = map[string]any

func loadSchema(t testing.TB, raw []byte) schemaNode {
	t.Helper()
	var s schemaNode
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&s))
	return s
}

// resolve follows a local "$ref" ("#/$defs/name").
func resolve(root, n schemaNode) schemaNode {
	for {
		ref, ok := n["$ref"].(string)
		if !ok {
			return n
		}
		name := strings.TrimPrefix(ref, "#/$defs/")
		n = root["$defs"].(schemaNode)[name].(schemaNode)
	}
}

// sub returns the (resolved) schema of property name of object schema n.
func sub(t testing.TB, root, n schemaNode, name string) schemaNode {
	t.Helper()
	props, ok := resolve(root, n)["properties"].(schemaNode)
	require.True(t, ok, "schema has no properties")
	p, ok := props[name].(schemaNode)
	require.True(t, ok, "schema has no property %q", name)
	return resolve(root, p)
}

var knownKeywords = []string{
	"$schema", "$id", "$ref", "$defs", "title", "description", "default", "format",
	"type", "properties", "required", "additionalProperties", "enum", "const", "pattern",
	"minLength", "maxLength", "minimum", "maximum", "maxProperties", "propertyNames", "items", "maxItems", "not",
}

// validateSchema checks instance (a JSON document) against root with a
// real JSON Schema draft 2020-12 validator and returns every violation,
// each with its JSON pointer.
func validateSchema(root schemaNode, instance []byte) []string {
	sch, err := compiledSchema(root)
	if err != nil {
		return []string{"schema does not compile: " + err.Error()}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(instance))
	if err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{err.Error()}
	}
	var errs []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			errs = append(errs, "/"+strings.Join(e.InstanceLocation, "/")+": "+e.Error())
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return errs
}

var schemas sync.Map // *schemaNode identity (its $id) → *jsonschema.Schema

// compiledSchema compiles root once per $id (the fuzz targets validate
// thousands of documents against one schema).
func compiledSchema(root schemaNode) (*jsonschema.Schema, error) {
	id, _ := root["$id"].(string)
	if s, ok := schemas.Load(id); ok {
		return s.(*jsonschema.Schema), nil
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(id, map[string]any(root)); err != nil {
		return nil, err
	}
	s, err := c.Compile(id)
	if err != nil {
		return nil, err
	}
	schemas.Store(id, s)
	return s, nil
}

// goJSONNames lists the JSON keys a Go type marshals, via struct tags; types
// with a custom MarshalJSON map to the struct that defines their wire form.
func goJSONNames(t reflect.Type) []string {
	if t == reflect.TypeFor[Effective]() {
		t = reflect.TypeFor[effectiveJSON]()
	}
	return jsonNames(t)
}

// goRequired lists the JSON keys a Go type always marshals (no omitempty/omitzero).
func goRequired(t reflect.Type) []string {
	if t == reflect.TypeFor[Effective]() {
		t = reflect.TypeFor[effectiveJSON]()
	}
	var req []string
	for _, f := range reflect.VisibleFields(t) {
		name := jsonName(f)
		if name == "" {
			continue
		}
		if tag := f.Tag.Get("json"); !strings.Contains(tag, ",omitempty") && !strings.Contains(tag, ",omitzero") {
			req = append(req, name)
		}
	}
	return req
}

// items returns the (resolved) item schema of array schema n.
func items(root, n schemaNode) schemaNode { return resolve(root, n["items"].(schemaNode)) }

func propNames(n schemaNode) []string {
	props, _ := n["properties"].(schemaNode)
	return slices.Sorted(maps.Keys(props))
}

func requiredNames(n schemaNode) []string {
	var out []string
	req, _ := n["required"].([]any)
	for _, r := range req {
		out = append(out, r.(string))
	}
	sort.Strings(out)
	return out
}

func enumStrings(n schemaNode) []string {
	var out []string
	for _, e := range n["enum"].([]any) {
		out = append(out, e.(string))
	}
	return out
}

func sorted(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }

func TestSchemaPropertiesMatchGoTypes(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	result := loadSchema(t, ResultSchema)
	for _, tc := range []struct {
		name     string
		root     schemaNode
		node     schemaNode
		typ      reflect.Type
		required []string // nil: derive from omitempty/omitzero
	}{
		{"spec", spec, spec, reflect.TypeFor[Spec](), []string{"command"}},
		{"spec.limits", spec, sub(t, spec, spec, "limits"), reflect.TypeFor[Limits](), []string{}},
		{"spec.heal", spec, sub(t, spec, spec, "heal"), reflect.TypeFor[HealPolicy](), []string{}},
		{"spec.volume", spec, sub(t, spec, spec, "volume"), reflect.TypeFor[Volume](), nil},
		{"spec.files[]", spec, items(spec, sub(t, spec, spec, "files")), reflect.TypeFor[File](), nil},
		{"spec.output", spec, sub(t, spec, spec, "output"), reflect.TypeFor[OutputPolicy](), nil},
		{"result", result, result, reflect.TypeFor[Result](), nil},
		{"result.stdout", result, sub(t, result, result, "stdout"), reflect.TypeFor[Output](), nil},
		{"result.stderr", result, sub(t, result, result, "stderr"), reflect.TypeFor[Output](), nil},
		{"result.errors[]", result, resolve(result, sub(t, result, result, "errors")["items"].(schemaNode)), reflect.TypeFor[FieldError](), nil},
		{"result.attempts[]", result, resolve(result, sub(t, result, result, "attempts")["items"].(schemaNode)), reflect.TypeFor[Attempt](), nil},
		{"result.limits", result, sub(t, result, result, "limits"), reflect.TypeFor[Effective](), nil},
		{"result.kept", result, sub(t, result, result, "kept"), reflect.TypeFor[Kept](), nil},
		{"result.kept.stdout", result, sub(t, result, sub(t, result, result, "kept"), "stdout"), reflect.TypeFor[Object](), nil},
		{"result.kept.stderr", result, sub(t, result, sub(t, result, result, "kept"), "stderr"), reflect.TypeFor[Object](), nil},
		{"result.artifacts[]", result, items(result, sub(t, result, result, "artifacts")), reflect.TypeFor[Object](), nil},
		{"result.refused[]", result, items(result, sub(t, result, result, "refused")), reflect.TypeFor[Refusal](), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, sorted(goJSONNames(tc.typ)), propNames(tc.node), "schema properties vs Go JSON tags")
			req := tc.required
			if req == nil {
				req = goRequired(tc.typ)
			}
			assert.ElementsMatch(t, req, requiredNames(tc.node), "schema required vs Go fields without omitempty")
		})
	}
	// The spec schema is closed at every level, like Decode.
	for _, n := range []schemaNode{spec, sub(t, spec, spec, "limits"), sub(t, spec, spec, "heal"), sub(t, spec, spec, "volume"),
		items(spec, sub(t, spec, spec, "files")), sub(t, spec, spec, "output")} {
		assert.Equal(t, false, n["additionalProperties"])
	}
}

func TestSchemaEnumsMatchGo(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	result := loadSchema(t, ResultSchema)
	defs := result["$defs"].(schemaNode)

	reasons := make([]string, len(Reasons))
	for i, r := range Reasons {
		reasons[i] = string(r)
	}
	assert.Equal(t, reasons, enumStrings(defs["reason"].(schemaNode)), "reason enum in documentation order")

	var states []string
	for _, r := range Reasons {
		if s := string(r.State()); !slices.Contains(states, s) {
			states = append(states, s)
		}
	}
	assert.Equal(t, sorted(states), sorted(enumStrings(defs["state"].(schemaNode))), "every state some reason implies")
	assert.Equal(t, []string{string(StateSucceeded), string(StateFailed), string(StateRejected), string(StateCanceled), string(StateInfra)},
		enumStrings(defs["state"].(schemaNode)))
	assert.Equal(t, []string{string(ActionInitial), string(ActionInstall), string(ActionRules), string(ActionLLM), string(ActionMemo)},
		enumStrings(defs["action"].(schemaNode)))
	assert.Equal(t, []string{"", string(HealOff), string(HealRules), string(HealLLM)},
		enumStrings(sub(t, spec, sub(t, spec, spec, "heal"), "mode")))
	assert.Equal(t, []string{"", string(VolumeRW), string(VolumeRO)},
		enumStrings(sub(t, spec, sub(t, spec, spec, "volume"), "mode")))
}

func TestSchemaFixedRulesMatchGo(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	env := sub(t, spec, spec, "env")
	labels := sub(t, spec, spec, "labels")
	lim := sub(t, spec, spec, "limits")
	num := func(n schemaNode, k string) float64 { f, _ := n[k].(json.Number).Float64(); return f }

	assert.Equal(t, "^"+strings.TrimSuffix(strings.TrimPrefix(idPattern.String(), "^"), "{1,128}$")+"{0,128}$",
		sub(t, spec, spec, "id")["pattern"], "id pattern (empty allowed: the scheduler assigns one)")
	assert.Equal(t, envNamePattern.String(), env["propertyNames"].(schemaNode)["pattern"])
	assert.Equal(t, labelPattern.String(), labels["propertyNames"].(schemaNode)["pattern"])
	assert.Equal(t, volumePattern.String(), sub(t, spec, sub(t, spec, spec, "volume"), "name")["pattern"])
	assert.EqualValues(t, MaxCommandBytes, num(sub(t, spec, spec, "command"), "maxLength"))
	assert.EqualValues(t, MaxWorkdir, num(sub(t, spec, spec, "workdir"), "maxLength"))
	assert.EqualValues(t, MaxEnvVars, num(env, "maxProperties"))
	assert.EqualValues(t, MaxEnvValue, num(env["additionalProperties"].(schemaNode), "maxLength"))
	assert.EqualValues(t, MaxLabels, num(labels, "maxProperties"))
	assert.EqualValues(t, MaxLabelValue, num(labels["additionalProperties"].(schemaNode), "maxLength"))
	assert.EqualValues(t, MinMemoryMB, num(sub(t, spec, lim, "memory_mb"), "minimum"))
	assert.EqualValues(t, MinCPUs, num(sub(t, spec, lim, "cpus"), "minimum"))
	assert.EqualValues(t, MinPids, num(sub(t, spec, lim, "pids"), "minimum"))
	for _, k := range []string{"command_timeout_s", "job_timeout_s", "output_bytes", "tmpfs_mb"} {
		assert.EqualValues(t, 1, num(sub(t, spec, lim, k), "minimum"), k)
	}

	files := sub(t, spec, spec, "files")
	file := items(spec, files)
	arts := sub(t, spec, spec, "artifacts")
	assert.EqualValues(t, MaxFiles, num(files, "maxItems"))
	assert.EqualValues(t, MaxArtifactPatterns, num(arts, "maxItems"))
	assert.EqualValues(t, MaxStdinBytes, num(sub(t, spec, spec, "stdin"), "maxLength"))
	path := sub(t, spec, file, "path")
	assert.EqualValues(t, MaxPathBytes, num(path, "maxLength"))
	assert.EqualValues(t, 1, num(path, "minLength"))
	assert.Equal(t, path, items(spec, arts), "a pattern has the rules of a path")
	assert.Contains(t, path["not"].(schemaNode)["pattern"], fmt.Sprintf("[^/]{%d}", MaxPathElem+1))
	assert.Contains(t, sub(t, spec, file, "ref")["pattern"], fmt.Sprintf("{0,%d}$", MaxRefBytes))
}

// The schema's patterns of agent I/O agree with CheckPath, CheckRef and
// ParseMode: what Go accepts, the schema accepts; the schema refuses what
// its rules can say.
func TestSchemaIOPatternsMatchGo(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	doc := func(f string) []byte { return []byte(`{"command":"x","files":[` + f + `]}`) }
	check := func(c ioCase, doc []byte) {
		errs := validateSchema(spec, doc)
		if c.msg == "" {
			assert.Empty(t, errs, "%q", c.in)
		} else if c.schema {
			assert.NotEmpty(t, errs, "%q: the schema says this rule", c.in)
		}
	}
	for _, c := range pathCases() {
		b, _ := json.Marshal(File{Path: c.in})
		check(c, doc(string(b)))
	}
	for _, c := range patternCases() {
		b, _ := json.Marshal([]string{c.in})
		check(c, []byte(`{"command":"x","artifacts":`+string(b)+`}`))
	}
	for _, m := range modeCases() {
		b, _ := json.Marshal(File{Path: "a", Mode: m.in})
		assert.Equal(t, m.msg == "", len(validateSchema(spec, doc(string(b)))) == 0, "mode %q", m.in)
	}
	for _, r := range refCases() {
		b, _ := json.Marshal(File{Path: "a", Ref: r.in})
		assert.Equal(t, r.msg == "", len(validateSchema(spec, doc(string(b)))) == 0, "ref %q", r.in)
	}
}

func TestSchemaAcceptsWhatGoAccepts(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	for _, doc := range acceptedDocs {
		s, err := Decode([]byte(doc))
		require.NoError(t, err, doc)
		_, err = Validate(&s, fuzzCaps)
		require.NoError(t, err, doc)
		assert.Empty(t, validateSchema(spec, []byte(doc)), doc)
		// A normalized spec, as the scheduler enqueues it, is valid too.
		Normalize(&s, fuzzCaps)
		b, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Empty(t, validateSchema(spec, b), string(b))
	}
}

func TestSchemaRejectsFixedRuleViolations(t *testing.T) {
	t.Parallel()
	spec := loadSchema(t, SpecSchema)
	for _, doc := range []string{
		`{}`,
		`{"command":""}`,
		`{"command":" \n\t"}`,
		`{"command":"x","Command":"y"}`,
		`{"command":"x","extra":1}`,
		`{"command":"x","v":2}`,
		`{"command":"x","id":"a b"}`,
		`{"command":"x","id":"` + strings.Repeat("a", 129) + `"}`,
		`{"command":"x","env":{"1A":"x"}}`,
		`{"command":"x","env":{"A":1}}`,
		`{"command":"x","workdir":"rel"}`,
		`{"command":"x","labels":{"-a":"x"}}`,
		`{"command":"x","limits":{"memory_mb":0}}`,
		`{"command":"x","limits":{"memory_mb":5}}`,
		`{"command":"x","limits":{"cpus":0}}`,
		`{"command":"x","limits":{"pids":-1}}`,
		`{"command":"x","limits":{"pids":1.5}}`,
		`{"command":"x","limits":{"swap":1}}`,
		`{"command":"x","heal":{"mode":"always"}}`,
		`{"command":"x","heal":{"max_attempts":-1}}`,
		`{"command":"x","heal":{"allow_install":"yes"}}`,
		`{"command":"x","volume":{}}`,
		`{"command":"x","volume":{"name":"a..b"}}`,
		`{"command":"x","volume":{"name":"v","mode":"wx"}}`,
		`{"command":null}`,
		`{"command":"x","files":"a"}`,
		`{"command":"x","files":[{}]}`,
		`{"command":"x","files":[{"path":"a","x":1}]}`,
		`{"command":"x","files":[{"path":""}]}`,
		`{"command":"x","files":[{"path":"/etc/passwd"}]}`,
		`{"command":"x","files":[{"path":"a/../b"}]}`,
		`{"command":"x","files":[{"path":".paddock/x"}]}`,
		`{"command":"x","files":[{"path":"a\nb"}]}`,
		`{"command":"x","files":[{"path":"` + strings.Repeat("a", MaxPathBytes+1) + `"}]}`,
		`{"command":"x","files":[{"path":"a","mode":"4755"}]}`,
		`{"command":"x","files":[{"path":"a","mode":644}]}`,
		`{"command":"x","files":[{"path":"a","ref":"../x"}]}`,
		`{"command":"x","files":[{"path":"a","content_b64":"e A="}]}`,
		`{"command":"x","files":[null]}`,
		`{"command":"x","files":[` + manyFiles(MaxFiles+1) + `]}`,
		`{"command":"x","stdin":"` + strings.Repeat("i", MaxStdinBytes+1) + `"}`,
		`{"command":"x","output":{"keep":"yes"}}`,
		`{"command":"x","output":{"kept":true}}`,
		`{"command":"x","artifacts":["/out"]}`,
		`{"command":"x","artifacts":[1]}`,
		`{"command":"x","artifacts":[` + manyPatterns(MaxArtifactPatterns+1) + `]}`,
	} {
		assert.NotEmpty(t, validateSchema(spec, []byte(doc)), doc)
		_, err := decodeAndValidate(doc, fuzzCaps)
		assert.ErrorIs(t, err, ErrInvalid, doc)
	}
}

func TestResultSchemaAcceptsResults(t *testing.T) {
	t.Parallel()
	result := loadSchema(t, ResultSchema)
	for _, r := range []Result{fullResult(), rejectedResult(), {}} {
		r.Finish(r.Reason)
		if r.Reason == "" {
			r.Finish(ReasonInfra)
		}
		b, err := json.Marshal(r)
		require.NoError(t, err)
		assert.Empty(t, validateSchema(result, b), string(b))
	}
	bad, err := json.Marshal(map[string]any{"v": 1, "id": "x", "state": "done", "reason": "ok", "stdout": map[string]any{}, "stderr": map[string]any{}})
	require.NoError(t, err)
	assert.NotEmpty(t, validateSchema(result, bad))
}

func TestSchemasEmbedded(t *testing.T) {
	t.Parallel()
	for _, raw := range [][]byte{SpecSchema, ResultSchema} {
		s := loadSchema(t, raw)
		assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", s["$schema"])
		assertKnownKeywords(t, s)
	}
}

func assertKnownKeywords(t *testing.T, n schemaNode) {
	t.Helper()
	for k, v := range n {
		switch k {
		case "properties", "$defs":
			for _, p := range v.(schemaNode) {
				assertKnownKeywords(t, p.(schemaNode))
			}
			continue
		}
		assert.Contains(t, knownKeywords, k)
		if m, ok := v.(schemaNode); ok && k != "default" {
			assertKnownKeywords(t, m)
		}
	}
}

// fullResult has every field set, for round-trip and schema tests.
func fullResult() Result {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	code := 1
	return Result{
		ID: "build-42.test", Reason: ReasonExitNonzero, Error: "command exited 1",
		ExitCode: &code,
		Stdout:   Output{Text: "head", Tail: "tail", Bytes: 3 << 20, Truncated: true, OmittedBytes: 3<<20 - 8},
		Stderr:   Output{Text: "boom\n", Bytes: 5},
		Attempts: []Attempt{
			{N: 1, Action: ActionInitial, Command: "jq . x", ExitCode: 127, Reason: ReasonExitNonzero, StderrTail: "jq: not found", StartedAt: at, DurationMS: 3},
			{N: 2, Action: ActionInstall, Command: "jq . x", ExitCode: 1, Reason: ReasonExitNonzero, Install: "apt-get install -y jq", Note: "installed jq", StartedAt: at.Add(time.Second), DurationMS: 900},
		},
		SubmittedAt: at, QueuedAt: at.Add(time.Millisecond), StartedAt: at.Add(2 * time.Millisecond), FinishedAt: at.Add(3 * time.Second),
		Worker: "w1", Image: DefaultImage, Queue: DefaultQueue, Labels: map[string]string{"pipeline": "ci"},
		Limits: &Effective{MemoryMB: 512, CPUs: 0.5, Pids: 64, CommandTimeout: 30 * time.Second, JobTimeout: 300 * time.Second, OutputBytes: 1 << 20, TmpfsMB: 64,
			KeepOutput: true},
		FencingToken: 7, LockWaitMS: 12, Runs: 1,
		Kept: &Kept{
			Stdout: Object{Name: StdoutObject("build-42.test", 1), Bytes: 3 << 20, SHA256: strings.Repeat("a", 64)},
			Stderr: Object{Bytes: 5, Note: "not kept: the tenant's output bucket is full"},
		},
		Artifacts: []Object{{Name: ArtifactObject("build-42.test", 1, "out/r.xml"), Path: "out/r.xml", Bytes: 10, SHA256: strings.Repeat("b", 64),
			Truncated: true, Note: "cut at the per-file cap"}},
		Refused: []Refusal{{Path: "out/link.xml", Reason: "a symlink"}},
	}
}

func rejectedResult() Result {
	_, err := decodeAndValidate(`{"command":"","limits":{"pids":0}}`, Caps{})
	r := Result{ID: "x", Error: err.Error(), Errors: FieldErrors(err)}
	r.Finish(ReasonRejected)
	return r
}
