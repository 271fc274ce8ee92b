package results

import (
	"encoding/base64"
	"strconv"
	"testing"
)

// FuzzParseCursor: a cursor comes from the caller; parsing it never
// panics, and what it accepts is a score and a job key, which List passes
// to Redis as arguments (never as key names).
func FuzzParseCursor(f *testing.F) {
	f.Add("")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("1764627265123 dev/j1")))
	f.Add(base64.RawURLEncoding.EncodeToString([]byte("NaN dev/j1")))
	f.Add("bm90IGEgY3Vyc29y")
	f.Fuzz(func(t *testing.T, c string) {
		score, member, err := parseCursor(c)
		if err != nil || c == "" {
			return
		}
		if n, err := strconv.ParseInt(score, 10, 64); err != nil || n < 0 {
			t.Fatalf("accepted score %q", score)
		}
		if member == "" {
			t.Fatalf("accepted an empty member from %q", c)
		}
	})
}
