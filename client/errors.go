package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/streamfull"
	"github.com/paddockhq/paddock/job"
)

var (
	// ErrConfig is wrapped by every invalid-configuration error of New and
	// Connect.
	ErrConfig = errors.New("client: invalid config")
	// ErrNotFinished: no result exists for the id: the job is queued or
	// running, or the id is unknown (never submitted, or its result expired).
	ErrNotFinished = errors.New("client: job not finished (or unknown)")
	// ErrNoStream is matched (errors.Is) by a *NoStreamError.
	ErrNoStream = errors.New("client: no Paddock stream")
	// ErrStreamFull is matched (errors.Is) by a *StreamFullError.
	ErrStreamFull = errors.New("client: Paddock stream full")
	// ErrQuota is matched (errors.Is) by a *QuotaError, and by a
	// *BucketFullError (io.go: the tenant's storage quota).
	ErrQuota = errors.New("client: tenant quota reached")
	// ErrPermission is matched (errors.Is) by a *PermissionError.
	ErrPermission = errors.New("client: NATS permission denied")
)

// NoStreamError reports a missing JetStream stream: no scheduler ever ran
// against this NATS server (or its account), or the tenant's stream was
// never made.
type NoStreamError struct {
	Stream string
	Tenant string // the client's tenant
	Err    error  // what NATS answered
}

func (e *NoStreamError) Error() string {
	if e.Tenant == "" || e.Tenant == job.DefaultTenant {
		return "client: no stream " + e.Stream + ": start a scheduler (`paddock up` or `paddock scheduler`)"
	}
	return fmt.Sprintf("client: no stream %s: tenant %q is not set up on this fleet: have the operator add it "+
		"(`paddock tenant add %s`) and run a scheduler", e.Stream, e.Tenant, e.Tenant)
}

// Is makes errors.Is(err, ErrNoStream) true.
func (e *NoStreamError) Is(target error) bool { return target == ErrNoStream }

func (e *NoStreamError) Unwrap() error { return e.Err }

// StreamFullError reports a submission JetStream refused because the
// tenant's stream (job.JobsStream) reached its size limit
// (results.StreamConfig.JobsMaxBytes; the stream refuses new submissions
// rather than drop accepted ones) or the NATS server ran out of JetStream
// storage. Nothing was stored: submitting the same spec again later is safe.
// A stream full by message count is the tenant's max-queued quota: a
// *QuotaError.
type StreamFullError struct {
	Stream string
	ID     string // the job id
	Err    error  // what NATS answered
}

func (e *StreamFullError) Error() string {
	return fmt.Sprintf("client: submit %s: stream %s is full (%v): the job was not submitted; "+
		"retry once the schedulers have caught up with the backlog, or have the operator raise "+
		"--jobs-max-bytes (results.StreamConfig.JobsMaxBytes) or the NATS server's JetStream storage (max_file_store)",
		e.ID, e.Stream, e.Err)
}

// Is makes errors.Is(err, ErrStreamFull) true.
func (e *StreamFullError) Is(target error) bool { return target == ErrStreamFull }

func (e *StreamFullError) Unwrap() error { return e.Err }

// QuotaMaxQueued names the quota on a tenant's jobs waiting or running (its
// stream's MaxMsgs).
const QuotaMaxQueued = "max-queued"

// QuotaError reports a submission refused because the tenant reached a
// quota: with QuotaMaxQueued, as many of its jobs as the quota allows are
// waiting or running (a job counts until it has a result). Nothing was
// stored: submitting the same spec again once jobs have finished is safe.
type QuotaError struct {
	Tenant string
	Quota  string // QuotaMaxQueued
	// Limit is the quota's value, 0 when unknown: the refusal does not
	// carry it, and a tenant's credentials cannot read its stream's
	// settings.
	Limit int64
	ID    string // the job id
	Err   error  // what NATS answered
}

func (e *QuotaError) Error() string {
	limit := "the tenant's " + e.Quota + " quota"
	if e.Limit > 0 {
		limit = fmt.Sprintf("the tenant's %s quota of %d", e.Quota, e.Limit)
	}
	return fmt.Sprintf("client: submit %s: tenant %q has as many jobs waiting or running as %s allows (%v): "+
		"the job was not submitted; submit it again once some of them have finished, or have the operator raise "+
		"the quota (`paddock tenant set %s --%s N`)", e.ID, e.Tenant, limit, e.Err, e.Tenant, e.Quota)
}

// Is makes errors.Is(err, ErrQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrQuota }

func (e *QuotaError) Unwrap() error { return e.Err }

// PermissionError reports a request or subscription the NATS server
// refused: the connection's credentials do not allow the client's tenant's
// subjects (they are another tenant's, or the connection does not use the
// tenant's inbox prefix).
type PermissionError struct {
	Tenant  string // the client's tenant
	Subject string // the subject the client used
	Err     error  // what NATS reported (errors.Is nats.ErrPermissionViolation)
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("client: NATS refused %s to tenant %q's client (%v): the connection's credentials are not "+
		"tenant %q's, or the connection does not use the tenant's inbox prefix %s; connect with the tenant's "+
		"credentials through client.Connect with ConnectConfig.Tenant (CLI: check --creds / NATS_CREDS), "+
		"or set Config.Tenant to the credentials' tenant", e.Subject, e.Tenant, e.Err, e.Tenant, job.InboxPrefix(e.Tenant))
}

// Is makes errors.Is(err, ErrPermission) true.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

func (e *PermissionError) Unwrap() error { return e.Err }

// publishErr names the job and turns "nobody stores this subject" into a
// *NoStreamError, "too many messages" into a *QuotaError, "no room" into a
// *StreamFullError, and a publish the server refused (it then never
// answers: the publish times out) into a *PermissionError.
func (c *Client) publishErr(id string, err error) error {
	stream := job.JobsStream(c.tenant)
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders):
		return &NoStreamError{Stream: stream, Tenant: c.tenant, Err: err}
	case maxMsgsExceeded(err):
		return &QuotaError{Tenant: c.tenant, Quota: QuotaMaxQueued, ID: id, Err: err}
	case streamfull.Is(err):
		return &StreamFullError{Stream: stream, ID: id, Err: err}
	}
	if perr := c.deniedAny(job.SubmitSubject(c.tenant)); perr != nil && timedOut(err) {
		return perr
	}
	return fmt.Errorf("client: submit %s: %w", id, err)
}

// maxMsgsExceeded reports whether err is JetStream refusing a publish
// because the stream holds MaxMsgs messages (DiscardNew): on a tenant's
// stream, its max-queued quota. nats-server answers JSStreamStoreFailedF
// (10077) with the store's ErrMaxMsgs text, "maximum messages exceeded"
// (ErrMaxBytes, "maximum bytes exceeded", is a full stream).
func maxMsgsExceeded(err error) bool {
	var apiErr *jetstream.APIError
	return streamfull.Is(err) && errors.As(err, &apiErr) &&
		strings.Contains(strings.ToLower(apiErr.Description), "maximum messages exceeded")
}

func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}
