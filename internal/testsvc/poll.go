package testsvc

import (
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if !Poll(ctx, interval, cond) {
		tb.Fatalf("not within %s: %s", within, fmt.Sprintf(format, args...))
	}
}

// Poll calls cond at once and then every interval until it is true
// (Poll returns true) or ctx ends (false): the one poll loop of the tests,
// for what has no signal to wait on (a container's health, a stream's
// count, a Sentinel's answer).
func Poll(ctx context.Context, interval time.Duration, cond func() bool) bool {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
