package sandbox

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by a Session or Runtime used after Close/Stop.
	ErrClosed = errors.New("sandbox: closed")
	// ErrSessionBroken is returned by Run after the container was destroyed
	// (job deadline, lost attach stream, a timed-out command init did not end).
	ErrSessionBroken = errors.New("sandbox: session container is gone")
	// ErrSandboxEnded is returned by Run when the job's own processes ended
	// the sandbox during the command (its init died under a limit the job
	// hit): the Outcome's Reason and Ended say how. The job failed; running
	// it again would not help.
	ErrSandboxEnded = fmt.Errorf("%w: the job's processes ended the sandbox", ErrSessionBroken)
)

// InfraError is a failure of the sandbox machinery (Docker engine, image,
// init protocol), never of the job's command. Retryable says whether running
// the job again elsewhere may succeed.
type InfraError struct {
	Op        string
	Err       error
	Retryable bool
}

func (e *InfraError) Error() string { return fmt.Sprintf("sandbox: %s: %v", e.Op, e.Err) }
func (e *InfraError) Unwrap() error { return e.Err }

func infra(op string, err error, retryable bool) error {
	return &InfraError{Op: op, Err: err, Retryable: retryable}
}

// IsRetryable reports whether err is an InfraError worth retrying.
func IsRetryable(err error) bool {
	var ie *InfraError
	return errors.As(err, &ie) && ie.Retryable
}
