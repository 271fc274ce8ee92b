package job

import "fmt"

// NoBroker is why no grant can be had on a fleet without a secrets
// broker.
const NoBroker = "this fleet runs no secrets broker (no policy file)"

// NoBrokerGrant is the one wording of a grant refused because the fleet
// runs no secrets broker: the scheduler's rejection (grants[i]) and
// broker.GrantError's message.
func NoBrokerGrant(grant string) string {
	return fmt.Sprintf("grant %q: %s: remove the grant from the job or ask the operator for one", grant, NoBroker)
}
