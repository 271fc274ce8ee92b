package asynqx

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The gate and the rescuer were written against asynq v0.26.0. When go.mod
// moves asynq, this fails: read the new version's rdb.Dequeue (its
// script's keys), the processor's idle loop (TaskCheckInterval's sleep),
// the lease (rdb.LeaseDuration, the heartbeater's ExtendLease) and the
// recoverer (its interval, its move to retry), run this package's tests,
// then update the pin.
func TestWrittenAgainstAsynqV0260(t *testing.T) {
	mod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	for line := range strings.Lines(string(mod)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/hibiken/asynq" {
			require.Equal(t, "v0.26.0", f[1], "asynq moved: audit internal/asynqx (doc.go) before updating this pin")
			return
		}
	}
	t.Fatal("go.mod requires no github.com/hibiken/asynq")
}
