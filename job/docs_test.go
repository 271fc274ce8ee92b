package job

import (
	"bytes"
	"encoding/json"
	"os"
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
	for _, v := range []string{StreamJobsPrefix + "<tenant>", SubjectSubmitPrefix + "<tenant>", ConsumerSchedulers, StreamResults,
		SubjectResultPrefix + "<tenant>.<id>", SubjectCancelPrefix + "<tenant>/<id>", SubjectCancelRequestPrefix + "<tenant>",
		InboxPrefixRoot + "<tenant>", HeaderMsgID, TaskType, EnvFencingToken} {
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
	for _, name := range jsonNames(reflect.TypeFor[Result]()) {
		assert.True(t, bytes.Contains([]byte(doc), []byte("`"+name+"`")), "result field %s", name)
	}
}
