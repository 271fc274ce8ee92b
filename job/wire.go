package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NATS subjects, stream names and header keys shared by the client,
// scheduler and worker.
const (
	// ConsumerSchedulers is the durable consumer every scheduler shares on
	// each tenant's stream of submissions (JobsStream).
	ConsumerSchedulers = "paddock-schedulers"

	// StreamResultsPrefix + tenant is the tenant's stream of terminal
	// results (ResultsStream): the last result per job for the retention
	// period, so Get and Wait work before and after a job ends. Each
	// tenant has its own, with its own size cap, so no tenant's results
	// can push another tenant's out.
	StreamResultsPrefix = "PADDOCK_RESULTS_"
	// StreamResults is the one results stream every tenant shared before
	// (results.MigrateLegacyResults moves it into the tenants' streams).
	StreamResults = "PADDOCK_RESULTS"
	// SubjectResultPrefix + tenant + "." + id is where a job's terminal
	// result is published; build it with ResultSubject (which escapes ids
	// such as "a." that would not make a valid subject) and parse it with
	// ParseResultSubject.
	SubjectResultPrefix = "paddock.results."

	// SubjectCancelPrefix + key asks whoever holds the job to cancel it; build
	// it with CancelSubject. Only the fleet's services use it.
	SubjectCancelPrefix = "paddock.cancel."

	// SubjectWakePrefix + queue tells idle workers that a job was just
	// enqueued on that queue (core NATS, no payload); build it with
	// WakeSubject. Only the scheduler publishes it, only workers read it: a
	// lost wake-up costs latency (the worker's idle poll finds the job),
	// never a job.
	SubjectWakePrefix = "paddock.wake."

	// HeaderMsgID is JetStream's de-duplication header; Paddock sets it to
	// the job id (each tenant's stream dedupes on its own).
	HeaderMsgID = "Nats-Msg-Id"

	// TaskHeaderQueuedAt carries the time the scheduler enqueued the task
	// (RFC 3339, UTC) in the asynq task headers.
	TaskHeaderQueuedAt = "paddock-queued-at"

	// TaskType is the asynq task type of a job.
	TaskType = "paddock:job"

	// EnvFencingToken is set in the container when a rw volume is held.
	EnvFencingToken = "PADDOCK_FENCING_TOKEN"
)

// ResultSubject is the subject the result of tenant's job id is published
// on: SubjectResultPrefix + tenant + "." + the id, escaped only where the id
// would not make a valid subject (see subjectSuffix). Ids may contain '.',
// so one id may span several subject tokens: subscribe to a tenant's results
// with ResultSubjects(tenant).
func ResultSubject(tenant, id string) string {
	return SubjectResultPrefix + orDefault(tenant) + "." + subjectSuffix(id)
}

// ResultsStream is the name of tenant's results stream.
func ResultsStream(tenant string) string { return StreamResultsPrefix + orDefault(tenant) }

// CancelSubject is the subject the fleet notifies a cancel of the job with
// this Key on.
func CancelSubject(key string) string { return SubjectCancelPrefix + subjectSuffix(key) }

// TaskKey is the job key of an asynq task id: the key itself, or the key
// and a "#" suffix (a worker's rescue of a dead worker's run re-enqueues it
// as <key>#rescue-<run>; internal/asynqx/rescue.go).
func TaskKey(taskID string) string {
	k, _, _ := strings.Cut(taskID, "#")
	return k
}

// WakeSubject is the subject of the wake-ups of a queue.
func WakeSubject(queue string) string { return SubjectWakePrefix + queue }

// ParseResultSubject returns the tenant and job id a result subject belongs
// to (the inverse of ResultSubject), or false when subject is not one.
func ParseResultSubject(subject string) (tenant, id string, ok bool) {
	rest, ok := strings.CutPrefix(subject, SubjectResultPrefix)
	if !ok {
		return "", "", false
	}
	tenant, rest, ok = strings.Cut(rest, ".")
	if !ok || CheckTenant(tenant) != nil {
		return "", "", false
	}
	id, ok = idFromSuffix(rest)
	if !ok || subjectSuffix(id) != rest { // only the canonical form names a job
		return "", "", false
	}
	return tenant, id, true
}

// subjectSuffix maps a job id to a valid, non-wildcard NATS subject tail,
// one-to-one:
//   - an id of [A-Za-z0-9._-] whose '.'-separated tokens are all non-empty
//     (every usual id: "build-42", "build-42.test") is used as it is;
//   - other ids of [A-Za-z0-9._-] (".", "..", ".a", "a.", "a..b": an empty
//     token is not a valid subject) have each '.' replaced by '~';
//   - any other id (it failed validation; "" or with '*', '>', spaces…) has
//     each '.' replaced by '~' and every byte outside [A-Za-z0-9_-] by %XX;
//     "" becomes "%".
//
// The three forms never collide: only the second holds '~' without '%',
// only the third holds '%'.
func subjectSuffix(id string) string {
	if id == "" {
		return "%"
	}
	plain, dots := true, false
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '.':
			dots = true
		case !idByte(c):
			plain = false
		}
	}
	if plain {
		if !dots || !slices.Contains(strings.Split(id, "."), "") {
			return id
		}
		return strings.ReplaceAll(id, ".", "~")
	}
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '.':
			b.WriteByte('~')
		case idByte(c):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func idFromSuffix(s string) (string, bool) {
	switch {
	case s == "%":
		return "", true
	case s == "":
		return "", false
	case !strings.ContainsAny(s, "~%"):
		return s, true
	case !strings.Contains(s, "%"):
		return strings.ReplaceAll(s, "~", "."), true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '~':
			b.WriteByte('.')
		case '%':
			if i+2 >= len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(n))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}
