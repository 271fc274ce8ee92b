package testsvc

import (
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f) // Fatalf does not return
}

func TestEventuallyReturnsOnceCondHolds(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, time.Millisecond, func() bool { n++; return n == 3 }, "n reaches 3")
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestEventuallyFailsAfterDeadline(t *testing.T) {
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				panic(r)
			}
		}()
		Eventually(f, 0, time.Millisecond, func() bool { return false }, "never %s", "true")
	}()
	if f.failed == "" {
		t.Fatal("a condition that never holds did not fail the test")
	}
}
