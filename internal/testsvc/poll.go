package testsvc

import (
	"fmt"
	"testing"
	"time"
)

// Eventually polls cond every interval until it holds, and fails tb with
// the message (fmt.Sprintf of format and args) once within has passed: a
// liveness deadline, never a timing assertion. It is nats.go's checkFor:
// cond runs on the calling goroutine, so it may use require and the test's
// own connections, and nothing of it outlives the call (testify's
// Eventually runs cond in a goroutine of its own that can).
func Eventually(tb testing.TB, within, interval time.Duration, cond func() bool, format string, args ...any) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("not within %s: %s", within, fmt.Sprintf(format, args...))
		}
		// sleep: the poll interval; what is polled for has no signal to wait on.
		time.Sleep(interval)
	}
}
