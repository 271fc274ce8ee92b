package results

import (
	"context"
	"fmt"
)

// Claim makes owner the one submission allowed to schedule key (SET NX, for
// the retention). ok is true when owner holds the claim, whether this call
// or an earlier one with the same owner took it; otherwise holder names the
// submission that did. The scheduler passes a token naming the JetStream
// message, so a redelivery of the same message keeps its claim while a
// second submission with the same key (in another queue, or after the
// stream's duplicate window) is refused.
func (s *Store) Claim(ctx context.Context, key, owner string) (holder string, ok bool, err error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	_, holder, err = s.setNX(ctx, s.key("claim", key), owner)
	if err != nil {
		return "", false, fmt.Errorf("results: claim %s: %w", key, err)
	}
	return holder, holder == owner, nil
}
