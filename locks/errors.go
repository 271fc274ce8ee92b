package locks

import (
	"errors"
	"fmt"
	"time"
)

// Expected outcomes. Every error this package returns for them wraps one of
// these, so callers test with errors.Is.
var (
	// ErrNotObtained: the lock or lease is held by someone else and the wait
	// budget (or the caller's context) ran out. Wrapped by *TimeoutError.
	ErrNotObtained = errors.New("locks: not obtained")

	// ErrLeaseLost: a held lease expired or was taken over. Wrapped by
	// *LostError.
	ErrLeaseLost = errors.New("locks: lease lost")

	// ErrNotHeld: a release found the lease already gone (expired, or taken
	// by another owner), or an operation needs a lock the caller does not hold.
	ErrNotHeld = errors.New("locks: not held")

	// ErrStaleToken: a write carried a fencing token lower than the highest
	// one the storage has seen. Wrapped by *StaleTokenError.
	ErrStaleToken = errors.New("locks: stale fencing token")

	// ErrInvalid: an invalid configuration, argument or volume name. Wrapped
	// by *NameError. Never worth retrying.
	ErrInvalid = errors.New("locks: invalid argument")
)

// TimeoutError reports a lock not obtained within its wait budget, or before
// the caller's context ended. It wraps ErrNotObtained, and Cause when set.
type TimeoutError struct {
	Lock   string        // "flock" or "lease"
	Name   string        // the lock file's path (flock) or the lease resource
	Waited time.Duration // how long the caller waited
	Cause  error         // the context's error when it ended first; nil when the budget ran out
}

func (e *TimeoutError) Error() string {
	s := fmt.Sprintf("locks: %s %s not obtained after %s", e.Lock, e.Name, e.Waited.Round(time.Millisecond))
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *TimeoutError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrNotObtained, e.Cause}
	}
	return []error{ErrNotObtained}
}

// Retryable is true: the holder will let go eventually.
func (e *TimeoutError) Retryable() bool { return true }

// LostError says why a held lease was lost. It wraps ErrLeaseLost, and Cause
// (the last refresh error) when set.
type LostError struct {
	Resource string
	Token    int64  // the fencing token of the lost lease
	Reason   string // what the watchdog saw
	Cause    error  // the last refresh error, if refreshes were failing
}

func (e *LostError) Error() string {
	s := fmt.Sprintf("locks: lease %s (fencing token %d) lost: %s", e.Resource, e.Token, e.Reason)
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *LostError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrLeaseLost, e.Cause}
	}
	return []error{ErrLeaseLost}
}

// Retryable is true: the lease was taken away by time, not refused by a rule.
func (e *LostError) Retryable() bool { return true }

// StaleTokenError rejects a write whose fencing token is lower than the
// highest one recorded for the storage. It wraps ErrStaleToken.
type StaleTokenError struct {
	Token   int64  // the token the write carried
	Highest int64  // the highest token recorded
	Path    string // the fence file
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("locks: stale fencing token %d: %s has seen %d", e.Token, e.Path, e.Highest)
}

func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// Retryable is false: a newer holder owns the storage; this one must stop.
func (e *StaleTokenError) Retryable() bool { return false }

// NameError rejects a volume name, or a volume path that is not a plain
// directory directly under the volume root. It wraps ErrInvalid.
type NameError struct {
	Name   string
	Reason string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("locks: volume %q: %s", e.Name, e.Reason)
}

func (e *NameError) Unwrap() error { return ErrInvalid }

// Retryable is false: the same name fails the same way next time.
func (e *NameError) Retryable() bool { return false }

// Retryable reports whether the operation that failed with err is worth
// retrying later: the error types above say so themselves, ErrInvalid never
// is, and anything else (Redis or file-system trouble) is assumed transient.
// The worker maps false to asynq.SkipRetry.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var r interface{ Retryable() bool }
	if errors.As(err, &r) {
		return r.Retryable()
	}
	return !errors.Is(err, ErrInvalid)
}
