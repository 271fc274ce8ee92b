package scheduler

import (
	"fmt"
	"strings"

	"github.com/paddockhq/paddock/job"
)

// GrantChecker tells whether a tenant has the secrets broker's grants a
// job names (*broker.Policy, through a holder that follows its reloads).
// Check returns nil, or an error per grant the tenant lacks.
type GrantChecker interface {
	Check(tenant string, names []string) error
}

// checkGrants rejects a spec naming a grant its tenant does not have, one
// field error per such grant. Without a GrantChecker the fleet runs no
// broker, and every grant is refused.
func (s *Scheduler) checkGrants(spec *job.Spec) error {
	var fields []job.FieldError
	for i, name := range spec.Grants {
		msg := job.NoBrokerGrant(name)
		if s.cfg.Grants != nil {
			err := s.cfg.Grants.Check(spec.Tenant, []string{name})
			if err == nil {
				continue
			}
			msg = strings.TrimPrefix(err.Error(), "broker: ")
		}
		fields = append(fields, job.FieldError{Field: fmt.Sprintf("grants[%d]", i), Message: msg})
	}
	if fields != nil {
		return &job.ValidationError{Fields: fields}
	}
	return nil
}
