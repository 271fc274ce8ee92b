package job

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCapsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Caps{}.Validate())
	require.NoError(t, Caps{Images: []string{"a:1"}, Queues: []string{"fast", "slow_2"}, EnvAllow: []string{"CI", "APP_*", "*"},
		DefaultMemoryMB: 256, MaxMemoryMB: 256, DefaultCPUs: 0.25, MaxCPUs: 4, MaxAttempts: 1}.Validate())
	require.NoError(t, Caps{MaxMemoryMB: MinMemoryMB, MaxPids: MinPids, MaxCPUs: MinCPUs, MaxOutputBytes: 1, MaxTmpfsMB: 1,
		MaxCommandTimeout: time.Second, MaxJobTimeout: time.Second}.Validate(), "every cap at its floor (the defaults follow)")

	cases := []struct {
		name  string
		caps  Caps
		field string // the one field named
		msg   string
	}{
		{"memory cap below floor", Caps{MaxMemoryMB: MinMemoryMB - 1}, "MaxMemoryMB",
			itoa(MinMemoryMB-1) + " is out of range; allowed " + itoa(MinMemoryMB) + " MiB or more"},
		{"memory default below floor", Caps{DefaultMemoryMB: MinMemoryMB - 1}, "DefaultMemoryMB",
			itoa(MinMemoryMB-1) + " is out of range; allowed " + itoa(MinMemoryMB) + "..2048 MiB (the cap)"},
		{"memory default above cap", Caps{DefaultMemoryMB: 4096, MaxMemoryMB: 1024}, "DefaultMemoryMB",
			"4096 is out of range; allowed " + itoa(MinMemoryMB) + "..1024 MiB (the cap)"},
		{"pids cap below floor", Caps{MaxPids: MinPids - 1}, "MaxPids",
			itoa(MinPids-1) + " is out of range; allowed " + itoa(MinPids) + " or more"},
		{"pids default below floor", Caps{DefaultPids: MinPids - 1}, "DefaultPids",
			itoa(MinPids-1) + " is out of range; allowed " + itoa(MinPids) + "..512 (the cap)"},
		{"negative pids cap", Caps{MaxPids: -1}, "MaxPids", "-1 is out of range; allowed " + itoa(MinPids) + " or more"},
		{"negative output cap", Caps{MaxOutputBytes: -1}, "MaxOutputBytes", "-1 is out of range; allowed 1 bytes or more"},
		{"tmpfs default above the built-in cap raises the cap", Caps{DefaultTmpfsMB: 2048}, "", ""}, // valid
		{"cpus default above cap", Caps{DefaultCPUs: 4, MaxCPUs: 2}, "DefaultCPUs", "4 is out of range; allowed 0.01..2 (the cap)"},
		{"cpus cap below floor", Caps{MaxCPUs: 0.001}, "MaxCPUs", "0.001 is out of range; allowed 0.01 or more"},
		{"cpus NaN", Caps{DefaultCPUs: math.NaN()}, "", "NaN"},
		{"cpus cap infinite", Caps{MaxCPUs: math.Inf(1)}, "MaxCPUs", "+Inf is out of range"},
		{"negative job timeout cap", Caps{MaxJobTimeout: -5 * time.Second}, "MaxJobTimeout", "-5s is out of range; allowed 1s or more"},
		{"negative command timeout default", Caps{DefaultCommandTimeout: -time.Second}, "DefaultCommandTimeout", "-1s is out of range; allowed 1s..5m0s (the cap)"},
		{"sub-second cap", Caps{MaxJobTimeout: 1500 * time.Millisecond}, "MaxJobTimeout", "1.5s is not a whole number of seconds"},
		{"sub-second default", Caps{DefaultCommandTimeout: 1500 * time.Millisecond}, "DefaultCommandTimeout", "1.5s is not a whole number of seconds"},
		{"command above job", Caps{DefaultCommandTimeout: time.Hour, MaxCommandTimeout: time.Hour}, "DefaultCommandTimeout",
			"1h0m0s exceeds the default job timeout 5m0s"},
		{"attempts", Caps{MaxAttempts: -1}, "MaxAttempts", "-1 is out of range; allowed 1 or more"},
		{"image blank", Caps{Images: []string{""}}, "Images", `image "" must be non-empty`},
		{"image space", Caps{Images: []string{"a b"}}, "Images", `image "a b"`},
		{"queue", Caps{Queues: []string{"Fast"}}, "Queues", `queue "Fast" must match`},
		{"env allow", Caps{EnvAllow: []string{"1X*"}}, "EnvAllow", `env allowlist entry "1X*"`},
		{"negative inline cap", Caps{MaxInlineBytes: -1}, "MaxInlineBytes",
			"-1 is out of range; allowed 0..196608 bytes (base64 contents must fit in a 262144-byte spec)"},
		{"inline cap over the spec", Caps{MaxInlineBytes: MaxSpecBytes*3/4 + 1}, "MaxInlineBytes", "196609 is out of range"},
		{"inline cap at its max", Caps{MaxInlineBytes: MaxSpecBytes * 3 / 4}, "", ""}, // valid
		{"keep default and no keep", Caps{KeepOutput: true, NoKeep: true}, "", ""},    // valid: NoKeep wins (KeepOutput)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.caps.Validate()
			if tc.msg == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidCaps)
			assert.NotErrorIs(t, err, ErrInvalid, "an operator error is not a rejected job")
			assert.Contains(t, err.Error(), tc.msg)
			var ce *CapsError
			require.True(t, errors.As(err, &ce))
			if tc.field != "" {
				require.Len(t, ce.Fields, 1, "one problem, named once: %v", err)
				assert.Equal(t, tc.field, ce.Fields[0].Field)
			}
		})
	}
}

// Every problem is reported, not only the first.
func TestCapsValidateReportsAll(t *testing.T) {
	t.Parallel()
	err := Caps{MaxMemoryMB: 1, MaxPids: 1, Queues: []string{"A"}}.Validate()
	var ce *CapsError
	require.ErrorAs(t, err, &ce)
	var fields []string
	for _, f := range ce.Fields {
		fields = append(fields, f.Field)
	}
	assert.ElementsMatch(t, []string{"Queues", "MaxMemoryMB", "MaxPids"}, fields)
}

func TestCapsWithDefaults(t *testing.T) {
	t.Parallel()
	c := Caps{}.WithDefaults()
	assert.Equal(t, []string{DefaultImage}, c.Images)
	assert.Equal(t, []string{DefaultQueue}, c.Queues)
	assert.EqualValues(t, 512, c.DefaultMemoryMB)
	assert.EqualValues(t, 2048, c.MaxMemoryMB)
	assert.EqualValues(t, 0.5, c.DefaultCPUs)
	assert.EqualValues(t, 2, c.MaxCPUs)
	assert.EqualValues(t, 64, c.DefaultPids)
	assert.EqualValues(t, 512, c.MaxPids)
	assert.EqualValues(t, 1<<20, c.DefaultOutputBytes)
	assert.EqualValues(t, 16<<20, c.MaxOutputBytes)
	assert.EqualValues(t, 64, c.DefaultTmpfsMB)
	assert.EqualValues(t, 1024, c.MaxTmpfsMB)
	assert.Equal(t, 30*time.Second, c.DefaultCommandTimeout)
	assert.Equal(t, 300*time.Second, c.MaxCommandTimeout)
	assert.Equal(t, 300*time.Second, c.DefaultJobTimeout)
	assert.Equal(t, time.Hour, c.MaxJobTimeout)
	assert.Equal(t, 3, c.MaxAttempts)
	assert.False(t, c.AllowInstall)
	assert.False(t, c.Volumes)
	assert.EqualValues(t, DefaultInlineBytes, c.MaxInlineBytes)
	assert.False(t, c.KeepOutput)
	assert.False(t, c.NoKeep)
	assert.Equal(t, c, c.WithDefaults(), "idempotent")
}

// A cap below the built-in default lowers the default to it, so that a
// low cap is a valid fleet and no job without limits runs above it.
func TestCapsDefaultsFollowLowCaps(t *testing.T) {
	t.Parallel()
	c := Caps{MaxMemoryMB: 256, MaxPids: 32, MaxCPUs: 0.25, MaxOutputBytes: 4096, MaxTmpfsMB: 16,
		MaxCommandTimeout: 10 * time.Second, MaxJobTimeout: 20 * time.Second}.WithDefaults()
	assert.EqualValues(t, 256, c.DefaultMemoryMB)
	assert.EqualValues(t, 32, c.DefaultPids)
	assert.EqualValues(t, 0.25, c.DefaultCPUs)
	assert.EqualValues(t, 4096, c.DefaultOutputBytes)
	assert.EqualValues(t, 16, c.DefaultTmpfsMB)
	assert.Equal(t, 10*time.Second, c.DefaultCommandTimeout)
	assert.Equal(t, 20*time.Second, c.DefaultJobTimeout)
	require.NoError(t, c.Validate())

	c = Caps{MaxJobTimeout: 10 * time.Second}.WithDefaults()
	assert.Equal(t, 10*time.Second, c.DefaultJobTimeout)
	assert.Equal(t, 10*time.Second, c.DefaultCommandTimeout, "the default command timeout fits the default job timeout")
	require.NoError(t, c.Validate())

	// Caps above the built-in defaults leave them.
	c = Caps{MaxMemoryMB: 8192, MaxJobTimeout: 2 * time.Hour}.WithDefaults()
	assert.EqualValues(t, 512, c.DefaultMemoryMB)
	assert.Equal(t, 300*time.Second, c.DefaultJobTimeout)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestQueueWeights(t *testing.T) {
	assert.Equal(t, map[string]int{"critical": 4, "default": 2, "low": 1}, QueueWeights([]string{"critical", "default", "low"}))
	assert.Equal(t, map[string]int{"default": 1}, QueueWeights([]string{"default"}))
	assert.Empty(t, QueueWeights(nil))
	many := make([]string, 40)
	for i := range many {
		many[i] = "q" + strconv.Itoa(i)
	}
	w := QueueWeights(many)
	assert.Equal(t, 1<<30, w["q0"], "weights stay in int range")
	assert.Equal(t, 1, w["q39"])
}
