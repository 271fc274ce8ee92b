package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docExamples returns the JSON blocks of docs/job-contract.md that follow an
// "<!-- example: kind -->" marker, by kind.
func docExamples(t *testing.T) (string, map[string][]string) {
	t.Helper()
	raw, err := os.ReadFile("../docs/job-contract.md")
	require.NoError(t, err, "docs/job-contract.md is part of the contract")
	doc := string(raw)
	out := map[string][]string{}
	for rest := doc; ; {
		i := strings.Index(rest, "<!-- example: ")
		if i < 0 {
			break
		}
		rest = rest[i+len("<!-- example: "):]
		kind, after, _ := strings.Cut(rest, " -->")
		_, body, ok := strings.Cut(after, "```json\n")
		require.True(t, ok, "example %s has no json block", kind)
		block, _, ok := strings.Cut(body, "```")
		require.True(t, ok)
		out[kind] = append(out[kind], block)
		rest = body
	}
	return doc, out
}

func TestDocExamples(t *testing.T) {
	t.Parallel()
	doc, ex := docExamples(t)
	require.Len(t, ex["spec"], 1)
	require.Len(t, ex["result"], 2)
	require.Len(t, ex["decode-errors"], 1)
	specSchema := loadSchema(t, SpecSchema)
	resultSchema := loadSchema(t, ResultSchema)

	// The example spec is valid on a fleet with volumes, and its effective
	// limits are the ones the example result shows.
	s, err := Decode([]byte(ex["spec"][0]))
	require.NoError(t, err)
	eff, err := Validate(&s, Caps{Volumes: true})
	require.NoError(t, err)
	assert.Empty(t, validateSchema(specSchema, []byte(ex["spec"][0])))

	for _, block := range ex["result"] {
		assert.Empty(t, validateSchema(resultSchema, []byte(block)), block)
		var r Result
		dec := json.NewDecoder(strings.NewReader(block))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&r), block)
		assert.Equal(t, r.Reason.State(), r.State)
		for _, o := range []Output{r.Stdout, r.Stderr} {
			if !o.Truncated {
				assert.EqualValues(t, len(o.Text), o.Bytes, "bytes of %q", o.Text)
			}
		}
		switch r.Reason {
		case ReasonOK:
			assert.Equal(t, &eff, r.Limits, "example result limits = Validate(example spec)")
			assert.Equal(t, s.Labels, r.Labels)
			assert.Equal(t, s.ID, r.ID)
		case ReasonRejected:
			const rejected = `{"id":"lint-7","command":"","image":"ubuntu:latest","env":{"PATH":"/opt/bin"},"limits":{"memory_mb":8192,"cpus":0}}`
			assert.Contains(t, doc, "`"+rejected+"`")
			_, err := decodeAndValidate(rejected, Caps{})
			assert.Equal(t, err.Error(), r.Error)
			assert.Equal(t, FieldErrors(err), r.Errors)
		}
	}

	const structural = `{"Command":"make","limits":{"memory_mb":"1g"},"env":{"A":"1","A":"2"}}`
	assert.Contains(t, doc, "`"+structural+"`")
	_, err = Decode([]byte(structural))
	var want []FieldError
	require.NoError(t, json.Unmarshal([]byte(ex["decode-errors"][0]), &want))
	assert.Equal(t, want, FieldErrors(err))
}

// TestDocNamesEveryReasonAndSubject keeps the reason table and the NATS
// table of the contract complete.
func TestDocNamesEveryReasonAndSubject(t *testing.T) {
	t.Parallel()
	doc, _ := docExamples(t)
	for _, r := range Reasons {
		assert.Contains(t, doc, "| `"+string(r)+"` | `"+string(r.State())+"` |", "reason row for %s", r)
	}
	for _, v := range []string{StreamJobsPrefix + "<tenant>", SubjectSubmitPrefix + "<tenant>", ConsumerSchedulers, StreamResultsPrefix + "<tenant>",
		SubjectResultPrefix + "<tenant>.<id>", SubjectCancelPrefix + "<tenant>/<id>", SubjectCancelRequestPrefix + "<tenant>",
		InboxPrefixRoot + "<tenant>", HeaderMsgID, TaskType, EnvFencingToken,
		SubjectOutputPrefix + "<tenant>.<id>", StreamOutputPrefix + "<tenant>", OutBucketPrefix + "<tenant>", InBucketPrefix + "<tenant>",
		StdoutObject("<id>", 1), StderrObject("<id>", 1), ArtifactObject("<id>", 1, "<path>")} {
		assert.Contains(t, doc, "`"+v+"`")
	}
	for _, name := range jsonNames(reflect.TypeFor[Spec]()) {
		assert.Contains(t, doc, "| `"+name+"` |", "spec field %s", name)
	}
	for _, name := range jsonNames(reflect.TypeFor[Limits]()) {
		assert.Contains(t, doc, "| `limits."+name+"` |", "limit %s", name)
	}
	for _, name := range jsonNames(reflect.TypeFor[HealPolicy]()) {
		assert.Contains(t, doc, "| `heal."+name+"` |", "heal field %s", name)
	}
	for _, name := range jsonNames(reflect.TypeFor[Volume]()) {
		assert.Contains(t, doc, "| `volume."+name+"` |", "volume field %s", name)
	}
	for _, h := range []string{HeaderOutStream, HeaderOutSeq, HeaderOutRun, HeaderOutSkipped, HeaderOutEnd} {
		assert.Contains(t, doc, "| `"+h+"` |", "live output header %s", h)
	}
	for _, name := range jsonNames(reflect.TypeFor[File]()) {
		assert.Contains(t, doc, "| `files[i]."+name+"` |", "file field %s", name)
	}
	for _, name := range jsonNames(reflect.TypeFor[OutputPolicy]()) {
		assert.Contains(t, doc, "| `output."+name+"` |", "output field %s", name)
	}
	for _, name := range jsonNames(reflect.TypeFor[Result]()) {
		assert.True(t, bytes.Contains([]byte(doc), []byte("`"+name+"`")), "result field %s", name)
	}
}

// TestDocIOExamples checks the agent I/O examples: the spec is valid (and
// passes the schema), the result passes the schema, decodes strictly and
// names the objects as the code does.
func TestDocIOExamples(t *testing.T) {
	t.Parallel()
	_, ex := docExamples(t)
	require.Len(t, ex["io-spec"], 1)
	require.Len(t, ex["io-result"], 1)

	s, err := Decode([]byte(ex["io-spec"][0]))
	require.NoError(t, err)
	eff, err := Validate(&s, Caps{})
	require.NoError(t, err)
	assert.True(t, eff.KeepOutput)
	assert.NotEmpty(t, s.Files)
	assert.NotEmpty(t, s.Artifacts)
	assert.Empty(t, validateSchema(loadSchema(t, SpecSchema), []byte(ex["io-spec"][0])))

	block := ex["io-result"][0]
	assert.Empty(t, validateSchema(loadSchema(t, ResultSchema), []byte(block)))
	var r Result
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&r))
	assert.Equal(t, s.ID, r.ID)
	assert.Equal(t, r.Reason.State(), r.State)
	assert.Equal(t, &eff, r.Limits, "example result limits = Validate(example spec)")
	require.NotNil(t, r.Kept)
	for _, kept := range []struct {
		obj  Object
		name string
		out  Output
	}{{r.Kept.Stdout, StdoutObject(r.ID, r.Runs), r.Stdout}, {r.Kept.Stderr, StderrObject(r.ID, r.Runs), r.Stderr}} {
		assert.Equal(t, kept.name, kept.obj.Name)
		assert.Equal(t, kept.out.Bytes, kept.obj.Bytes)
		sum := sha256.Sum256([]byte(kept.out.Text))
		assert.Equal(t, hex.EncodeToString(sum[:]), kept.obj.SHA256, "the whole stream is in the result here")
	}
	require.NotEmpty(t, r.Artifacts)
	for _, a := range r.Artifacts {
		assert.Equal(t, ArtifactObject(r.ID, r.Runs, a.Path), a.Name)
		assert.Regexp(t, "^[0-9a-f]{64}$", a.SHA256)
		matched := false
		for _, p := range s.Artifacts {
			matched = matched || matchPattern(p, a.Path)
		}
		assert.True(t, matched, "artifact %s matches a pattern of the spec", a.Path)
	}
	for _, ref := range r.Refused {
		assert.NoError(t, CheckPath(ref.Path))
	}
}

// matchPattern is the artifact match the contract describes: path.Match
// element by element, "**" for any number of directories.
func matchPattern(pattern, name string) bool {
	return matchElems(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchElems(pe, ne []string) bool {
	switch {
	case len(pe) == 0:
		return len(ne) == 0
	case pe[0] == "**":
		for i := 0; i <= len(ne); i++ {
			if matchElems(pe[1:], ne[i:]) {
				return true
			}
		}
		return false
	case len(ne) == 0:
		return false
	}
	ok, err := path.Match(pe[0], ne[0])
	return err == nil && ok && matchElems(pe[1:], ne[1:])
}

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"out/*.xml", "out/report.xml", true},
		{"out/*.xml", "out/sub/report.xml", false},
		{"*.xml", "out/report.xml", false},
		{"**/*.log", "run.log", true},
		{"**/*.log", "a/b/run.log", true},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"**", "a/b", true},
	} {
		assert.Equal(t, tc.want, matchPattern(tc.pattern, tc.name), "%s ~ %s", tc.pattern, tc.name)
	}
}

// TestDocIOErrors keeps the error examples of the files, stdin, output
// and artifacts rows what the code produces.
func TestDocIOErrors(t *testing.T) {
	t.Parallel()
	doc, _ := docExamples(t)
	for _, tc := range []struct {
		doc  string
		caps Caps
	}{
		{filesDoc(manyFiles(MaxFiles + 1)), fuzzCaps},
		{withCmd(`"stdin":"` + strings.Repeat("i", MaxStdinBytes+1) + `"`), fuzzCaps},
		{withCmd(`"artifacts":[` + manyPatterns(MaxArtifactPatterns+1) + `]`), fuzzCaps},
		{filesDoc(`{"path":""}`), fuzzCaps},
		{filesDoc(`{"path":"/etc/passwd"}`), fuzzCaps},
		{filesDoc(`{"path":"a/../../etc"}`), fuzzCaps},
		{filesDoc(`{"path":"a//b"}`), fuzzCaps},
		{filesDoc(`{"path":"a\nb"}`), fuzzCaps},
		{filesDoc(`{"path":".paddock/x"}`), fuzzCaps},
		{filesDoc(`{"path":"a"}`, `{"path":"a"}`), fuzzCaps},
		{filesDoc(`{"path":"a"}`, `{"path":"a/b"}`), fuzzCaps},
		{filesDoc(`{"path":"a","content_b64":"eA"}`), fuzzCaps},
		{filesDoc(`{"path":"a","ref":"a b"}`), fuzzCaps},
		{filesDoc(`{"path":"a","ref":"../x"}`), fuzzCaps},
		{filesDoc(`{"path":"a","ref":"r","content_b64":"eA=="}`), fuzzCaps},
		{filesDoc(`{"path":"a","mode":"rwx"}`), fuzzCaps},
		{filesDoc(`{"path":"a","mode":"4755"}`), fuzzCaps},
		{filesDoc(`{"path":"a","content_b64":"` + b64(135000) + `"}`), fuzzCaps},
		{withCmd(`"volume":{"name":"v","mode":"ro"},"files":[{"path":"a"}]`), fuzzCaps},
		{withCmd(`"output":{"keep":true}`), Caps{NoKeep: true}},
		{withCmd(`"artifacts":["/out"]`), fuzzCaps},
		{withCmd(`"artifacts":["a/../b"]`), fuzzCaps},
		{withCmd(`"artifacts":["out/[a"]`), fuzzCaps},
	} {
		_, err := decodeAndValidate(tc.doc, tc.caps)
		fes := FieldErrors(err)
		require.Len(t, fes, 1, "%.100s", tc.doc)
		assert.Contains(t, doc, "`"+fes[0].Error()+"`", "docs/job-contract.md shows this error as the code writes it")
	}
}
