package tenant

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/paddockhq/paddock/job"
)

// ErrInvalid is wrapped by every error of Tenant.Validate.
var ErrInvalid = errors.New("tenant: invalid record")

// Bounds of the quotas of a Tenant. They are sanity limits that catch a
// typo or an overflow, far above what one fleet serves.
const (
	// MaxMaxQueued bounds Tenant.MaxQueued.
	MaxMaxQueued = 1_000_000_000
	// MaxMaxRunning bounds Tenant.MaxRunning.
	MaxMaxRunning = 100_000
	// MaxRate bounds Tenant.Rate (jobs per second).
	MaxRate = 1_000_000
	// MaxMaxStored bounds Tenant.MaxStored (1 PiB).
	MaxMaxStored = 1 << 50
)

// Tenant is the record of one tenant, as the registry stores it (JSON).
type Tenant struct {
	// Name is the tenant's name (job.CheckTenant), the key of the record.
	Name string `json:"name"`
	// MaxQueued bounds the tenant's backlog of submissions no scheduler has
	// taken yet (the MaxMsgs of its stream); 0 means unlimited.
	MaxQueued int64 `json:"max_queued"`
	// MaxRunning bounds the tenant's jobs running at once; 0 means the
	// fleet's default.
	MaxRunning int `json:"max_running"`
	// Rate bounds the jobs per second the tenant may start; 0 means
	// unlimited.
	Rate int `json:"rate"`
	// MaxStored is the size of each of the tenant's buckets (kept output
	// and artifacts; uploads), in bytes; 0 means the fleet's default
	// (results.StoreQuota.StoredMaxBytes).
	MaxStored int64 `json:"max_stored,omitempty"`
	// CreatedAt is when the tenant was added.
	CreatedAt time.Time `json:"created_at"`
	// User is the public nkey of the tenant's current NATS user ("U…"),
	// the one its credentials hold; empty when none was issued.
	User string `json:"user,omitempty"`
	// Account is the public key of the tenant's own NATS account ("A…",
	// Authority.TenantAccountKey), where its users live; empty for a
	// tenant recorded before tenants had accounts (`paddock tenant migrate`
	// moves it).
	Account string `json:"account,omitempty"`
}

// ValidationError is one invalid field of a Tenant. It matches ErrInvalid
// (and, for a bad name, job.ErrInvalidTenant) with errors.Is.
type ValidationError struct {
	// Field is the JSON name of the field.
	Field string
	// Value is the rejected value.
	Value any
	// Rule says what the field accepts.
	Rule string
	// Err is the underlying error, if any.
	Err error
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("tenant: invalid %s %v: %s", e.Field, e.Value, e.Rule)
}

// Unwrap returns ErrInvalid and the underlying error.
func (e *ValidationError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// Validate reports every invalid field of t, joined; each is a
// *ValidationError.
func (t *Tenant) Validate() error {
	var errs []error
	if err := job.CheckTenant(t.Name); err != nil {
		errs = append(errs, &ValidationError{Field: "name", Value: fmt.Sprintf("%q", t.Name), Err: err,
			Rule: fmt.Sprintf("1 to %d of [a-z0-9-], starting with a letter, not ending with '-'", job.MaxTenantLen)})
	}
	if t.MaxQueued < 0 || t.MaxQueued > MaxMaxQueued {
		errs = append(errs, &ValidationError{Field: "max_queued", Value: t.MaxQueued,
			Rule: fmt.Sprintf("must be 0 (unlimited) to %d", MaxMaxQueued)})
	}
	if t.MaxRunning < 0 || t.MaxRunning > MaxMaxRunning {
		errs = append(errs, &ValidationError{Field: "max_running", Value: t.MaxRunning,
			Rule: fmt.Sprintf("must be 0 (the fleet default) to %d", MaxMaxRunning)})
	}
	if t.Rate < 0 || t.Rate > MaxRate {
		errs = append(errs, &ValidationError{Field: "rate", Value: t.Rate,
			Rule: fmt.Sprintf("must be 0 (unlimited) to %d jobs per second", MaxRate)})
	}
	if t.MaxStored < 0 || t.MaxStored > MaxMaxStored {
		errs = append(errs, &ValidationError{Field: "max_stored", Value: t.MaxStored,
			Rule: fmt.Sprintf("must be 0 (the fleet default) to %d bytes", int64(MaxMaxStored))})
	}
	if t.User != "" && !nkeys.IsValidPublicUserKey(t.User) {
		errs = append(errs, &ValidationError{Field: "user", Value: fmt.Sprintf("%q", t.User),
			Rule: "must be empty or the public nkey of a NATS user (\"U\" and 55 characters)"})
	}
	if t.Account != "" && !nkeys.IsValidPublicAccountKey(t.Account) {
		errs = append(errs, &ValidationError{Field: "account", Value: fmt.Sprintf("%q", t.Account),
			Rule: "must be empty or the public nkey of a NATS account (\"A\" and 55 characters)"})
	}
	return errors.Join(errs...)
}
