package results

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

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
				data, err := fit(r, limit)
				require.NoError(t, err)
				assert.LessOrEqual(t, len(data), limit)
				var got job.Result
				require.NoError(t, json.Unmarshal(data, &got))
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

func TestFitImpossible(t *testing.T) {
	r := job.Result{ID: "f", Error: strings.Repeat("x", 10000)}
	r.Finish(job.ReasonInfra)
	_, err := fit(r, 1000)
	require.Error(t, err)
}
