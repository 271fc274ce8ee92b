package job

import (
	"fmt"
	"strings"
)

// NATS subjects, stream names and header keys shared by the client,
// scheduler and worker.
const (
	// StreamJobs holds submissions; any number of schedulers share ConsumerSchedulers.
	StreamJobs         = "PADDOCK_JOBS"
	SubjectSubmit      = "paddock.jobs.submit"
	ConsumerSchedulers = "paddock-schedulers"

	// StreamResults keeps the last result per job for the retention period,
	// so Get and Wait work before and after a job ends.
	StreamResults = "PADDOCK_RESULTS"
	// SubjectResultPrefix + SubjectToken(id) is where a job's terminal result
	// is published; build it with ResultSubject, never by concatenating the id.
	SubjectResultPrefix = "paddock.results."

	// SubjectCancelPrefix + SubjectToken(id) asks whoever holds the job to
	// cancel it; build it with CancelSubject.
	SubjectCancelPrefix = "paddock.cancel."

	// HeaderMsgID is JetStream's de-duplication header; Paddock sets it to the job id.
	HeaderMsgID = "Nats-Msg-Id"

	// TaskType is the asynq task type of a job.
	TaskType = "paddock:job"

	// EnvFencingToken is set in the container when a rw volume is held.
	EnvFencingToken = "PADDOCK_FENCING_TOKEN"
)

// ResultSubject is the subject a job's result is published on: always one
// token below SubjectResultPrefix, so "paddock.results.*" matches every job.
func ResultSubject(id string) string { return SubjectResultPrefix + SubjectToken(id) }

// CancelSubject is the subject a job's cancel request is published on.
func CancelSubject(id string) string { return SubjectCancelPrefix + SubjectToken(id) }

// SubjectToken encodes a job id as exactly one NATS subject token. Job ids
// may contain '.', NATS's token separator ("a.b" would be two tokens, and
// ".", "a." or "a..b" are not valid subjects at all), so '.' becomes '~'.
// Any other byte outside [A-Za-z0-9_-] (only possible in an id that failed
// validation, such as '*', '>' or a space) becomes %XX. The encoding is
// injective and maps "" to "%"; valid ids differ from their token only in
// '.' → '~'.
func SubjectToken(id string) string {
	if id == "" {
		return "%"
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.':
			b.WriteByte('~')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
