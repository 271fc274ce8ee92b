package results

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

// decodeStrict decodes a stored result as strictly as encoding/json allows:
// valid UTF-8, one value, no unknown field.
func decodeStrict(t *testing.T, data []byte) job.Result {
	t.Helper()
	require.True(t, utf8.Valid(data), "valid UTF-8")
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r job.Result
	require.NoError(t, dec.Decode(&r))
	require.False(t, dec.More(), "one JSON value")
	return r
}

func TestFit(t *testing.T) {
	for name, text := range map[string]string{
		"ascii":     strings.Repeat("abcdefgh", 40000),
		"multibyte": strings.Repeat("日本語é😀", 20000),
		"one rune":  "😀",
	} {
		t.Run(name, func(t *testing.T) {
			r := job.Result{ID: "f", Stdout: job.Output{Text: text, Bytes: int64(len(text))}, Stderr: job.Output{Text: text},
				Attempts: []job.Attempt{{N: 1, StderrTail: text}, {N: 2, StderrTail: text}}}
			r.Finish(job.ReasonExitNonzero)
			for _, limit := range []int{200 << 10, 8 << 10, 600} {
				data, _, err := fit(r, limit)
				require.NoError(t, err)
				assert.LessOrEqual(t, len(data), limit)
				got := decodeStrict(t, data)
				for _, o := range []job.Output{got.Stdout, got.Stderr} {
					assert.True(t, utf8.ValidString(o.Text) && utf8.ValidString(o.Tail))
					assert.True(t, strings.HasPrefix(text, o.Text))
					assert.True(t, strings.HasSuffix(text, o.Tail))
					if o.Truncated {
						assert.Equal(t, int64(len(text)), int64(len(o.Text)+len(o.Tail))+o.OmittedBytes)
					}
				}
				for _, a := range got.Attempts {
					assert.True(t, strings.HasSuffix(text, a.StderrTail))
				}
			}
		})
	}
}

// A result within the bound is encoded exactly as json.Marshal does, and
// fit does not touch the caller's result.
func TestFitLeavesSmallResultAlone(t *testing.T) {
	code := 3
	r := job.Result{ID: "small", ExitCode: &code, Stdout: job.Output{Text: "<b>\x01\n", Bytes: 5},
		Attempts: []job.Attempt{{N: 1, Command: "make", StderrTail: "boom"}}, Labels: map[string]string{"k": "v"}}
	r.Finish(job.ReasonExitNonzero)
	want, err := json.Marshal(r)
	require.NoError(t, err)
	data, trimmed, err := fit(r, 1<<20)
	require.NoError(t, err)
	assert.False(t, trimmed)
	assert.Equal(t, want, data)

	big := r
	big.Stdout = job.Output{Text: strings.Repeat("x", 100<<10), Bytes: 100 << 10}
	big.Attempts = []job.Attempt{{N: 1, Command: "make", StderrTail: strings.Repeat("y", 50<<10)}}
	_, trimmed, err = fit(big, 20<<10)
	require.NoError(t, err)
	assert.True(t, trimmed)
	assert.Len(t, big.Attempts[0].StderrTail, 50<<10, "the caller's attempts are not cut")
	assert.False(t, big.Stdout.Truncated)
}

// The bound is measured on the JSON encoding: text under the bound in raw
// bytes but over it once escaped (control bytes, HTML characters) is cut.
func TestFitCountsEscaping(t *testing.T) {
	for name, unit := range map[string]string{
		"control bytes":  "\x01\x02\x1f\x00",
		"html":           "<>&",
		"line separator": "\u2028",
	} {
		t.Run(name, func(t *testing.T) {
			text := strings.Repeat(unit, (40<<10)/len(unit)) // 40 KiB raw: under the bound
			r := job.Result{ID: "esc", Stdout: job.Output{Text: text, Bytes: int64(len(text))}}
			r.Finish(job.ReasonOK)
			plain, err := json.Marshal(r)
			require.NoError(t, err)
			require.Greater(t, len(plain), 64<<10, "escaping makes it larger than the bound")

			data, trimmed, err := fit(r, 64<<10)
			require.NoError(t, err)
			assert.True(t, trimmed)
			assert.LessOrEqual(t, len(data), 64<<10)
			got := decodeStrict(t, data)
			assert.True(t, got.Stdout.Truncated)
			assert.Equal(t, int64(len(text)), int64(len(got.Stdout.Text)+len(got.Stdout.Tail))+got.Stdout.OmittedBytes)
			assert.Greater(t, len(data), 32<<10, "no more is cut than needed")
		})
	}
}

// Invalid UTF-8 (a long run of continuation bytes) is cut where the share
// says, not dropped whole, and comes out as valid UTF-8.
func TestFitInvalidUTF8(t *testing.T) {
	text := strings.Repeat("\x80", 1<<20)
	r := job.Result{ID: "bad", Stdout: job.Output{Text: text, Bytes: int64(len(text))}, Stderr: job.Output{Text: "\xff" + text}}
	r.Finish(job.ReasonOK)
	data, trimmed, err := fit(r, 64<<10)
	require.NoError(t, err)
	assert.True(t, trimmed)
	assert.LessOrEqual(t, len(data), 64<<10)
	got := decodeStrict(t, data)
	assert.NotEmpty(t, got.Stdout.Text, "the head is kept")
	assert.NotEmpty(t, got.Stdout.Tail, "the tail is kept")
	assert.Equal(t, strings.Repeat("\uFFFD", utf8.RuneCountInString(got.Stdout.Text)), got.Stdout.Text)
}

// When the outputs are gone and the result still does not fit, the other
// texts a job controls are cut and marked.
func TestFitLastResort(t *testing.T) {
	cmd := strings.Repeat("<", 64<<10) // escapes to 384 KiB
	r := job.Result{ID: "huge-cmd", Error: strings.Repeat("e", 100<<10), Stdout: job.Output{Text: "out", Bytes: 3},
		Attempts: []job.Attempt{{N: 1, Command: cmd, Note: cmd}, {N: 2, Command: cmd, Install: cmd}},
		Labels:   map[string]string{"a": strings.Repeat("&", 256)}}
	r.Finish(job.ReasonExitNonzero)
	data, trimmed, err := fit(r, 32<<10)
	require.NoError(t, err)
	assert.True(t, trimmed)
	assert.LessOrEqual(t, len(data), 32<<10)
	got := decodeStrict(t, data)
	assert.True(t, strings.HasSuffix(got.Error, trimMarker))
	assert.True(t, strings.HasPrefix(got.Error, "eee"))
	for _, a := range got.Attempts {
		assert.True(t, strings.HasSuffix(a.Command, trimMarker), a.Command)
		assert.True(t, strings.HasPrefix(a.Command, "<"))
	}
	assert.Empty(t, got.Stdout.Text+got.Stdout.Tail, "outputs go first")
	assert.Equal(t, job.ReasonExitNonzero, got.Reason)
	assert.Len(t, r.Attempts[0].Command, 64<<10, "the caller's attempts are not cut")
}

func TestFitImpossible(t *testing.T) {
	// Label keys are not cut: 100 of them cannot fit in 1000 bytes.
	labels := map[string]string{}
	for i := range 100 {
		labels[strings.Repeat(string(rune('a'+i%26)), 40)+string(rune('A'+i/26))] = "v"
	}
	r := job.Result{ID: "f", Labels: labels}
	r.Finish(job.ReasonInfra)
	_, _, err := fit(r, 1000)
	require.Error(t, err)
}
