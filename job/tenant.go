package job

import (
	"errors"
	"fmt"
	"strings"
)

// Tenants. Every job belongs to the tenant whose credentials published it:
// the scheduler takes the tenant from the subject the submission arrived on
// (SubmitSubject), which the NATS server lets only that tenant publish to.
// The tenant is never read from a submitted spec.
const (
	// DefaultTenant owns the jobs of a fleet that runs without
	// authentication (a client that names no tenant submits as it).
	DefaultTenant = "default"
	// MaxTenantLen bounds a tenant name.
	MaxTenantLen = 32
)

// ErrInvalidTenant is wrapped by CheckTenant's errors.
var ErrInvalidTenant = errors.New("job: invalid tenant name")

// CheckTenant reports whether name can name a tenant: 1 to 32 of [a-z0-9-],
// starting with a letter and not ending with '-'. Such a name is one NATS
// subject token, part of a stream name, and a Redis key segment as it is.
func CheckTenant(name string) error {
	if name == "" || len(name) > MaxTenantLen {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrInvalidTenant, name, MaxTenantLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || i > 0 && ('0' <= c && c <= '9' || c == '-')) {
			return fmt.Errorf("%w: %q: use [a-z0-9-], starting with a letter", ErrInvalidTenant, name)
		}
	}
	if strings.HasSuffix(name, "-") {
		return fmt.Errorf("%w: %q must not end with '-'", ErrInvalidTenant, name)
	}
	return nil
}

// Subjects and streams of a tenant. The NATS permissions of a tenant's
// credentials (package tenant) allow exactly these, so that the server, not
// the client, keeps tenants apart.
const (
	// SubjectSubmitPrefix + tenant is where a tenant's submissions go.
	SubjectSubmitPrefix = "paddock.jobs.submit."
	// StreamJobsPrefix + tenant is the tenant's stream of submissions (its
	// backlog; the stream's MaxMsgs is the tenant's max-queued quota).
	StreamJobsPrefix = "PADDOCK_JOBS_"
	// SubjectCancelRequestPrefix + tenant is a tenant's cancel request
	// subject; schedulers answer SubjectCancelRequests.
	SubjectCancelRequestPrefix = "paddock.api.cancel."
	SubjectCancelRequests      = SubjectCancelRequestPrefix + "*"
	// InboxPrefixRoot + tenant is the inbox prefix of a tenant's
	// connections: replies reach only the tenant that asked.
	InboxPrefixRoot = "_INBOX."
)

// SubmitSubject is the subject tenant publishes its submissions on.
func SubmitSubject(tenant string) string { return SubjectSubmitPrefix + tenant }

// JobsStream is the name of tenant's stream of submissions.
func JobsStream(tenant string) string { return StreamJobsPrefix + tenant }

// TenantFromSubmitSubject returns the tenant a submission subject belongs
// to, or false when subject is not one.
func TenantFromSubmitSubject(subject string) (string, bool) {
	return tenantAfter(SubjectSubmitPrefix, subject)
}

// tenantAfter is the tenant that is the whole rest of subject after prefix.
func tenantAfter(prefix, subject string) (string, bool) {
	t, ok := strings.CutPrefix(subject, prefix)
	if !ok || CheckTenant(t) != nil {
		return "", false
	}
	return t, true
}

// CancelRequestSubject is the subject tenant sends cancel requests to.
func CancelRequestSubject(tenant string) string { return SubjectCancelRequestPrefix + tenant }

// TenantFromCancelSubject returns the tenant of a cancel request subject.
func TenantFromCancelSubject(subject string) (string, bool) {
	return tenantAfter(SubjectCancelRequestPrefix, subject)
}

// InboxPrefix is the inbox prefix of tenant's connections (nats.go
// CustomInboxPrefix).
func InboxPrefix(tenant string) string { return InboxPrefixRoot + tenant }

// ResultSubjects is the wildcard of every result subject of tenant.
func ResultSubjects(tenant string) string { return SubjectResultPrefix + tenant + ".>" }

// Key is the fleet-wide name of a tenant's job: "tenant/id". Ids are unique
// per tenant, so two tenants may use the same id; everything shared (the
// asynq task id, Redis keys, the workers' cancel subject) is keyed by Key.
// '/' is in no valid tenant name or id, so a Key splits one way only.
// An empty tenant is DefaultTenant.
func Key(tenant, id string) string { return orDefault(tenant) + "/" + id }

// SplitKey is the inverse of Key.
func SplitKey(key string) (tenant, id string, ok bool) {
	return strings.Cut(key, "/")
}

// Key is the fleet-wide name of s (job.Key of its tenant and id).
func (s *Spec) Key() string { return Key(s.tenant(), s.ID) }

// Key is the fleet-wide name of r's job.
func (r *Result) Key() string { return Key(r.tenant(), r.ID) }

func (s *Spec) tenant() string   { return orDefault(s.Tenant) }
func (r *Result) tenant() string { return orDefault(r.Tenant) }

func orDefault(t string) string {
	if t == "" {
		return DefaultTenant
	}
	return t
}
