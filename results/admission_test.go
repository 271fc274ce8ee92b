package results_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdmitCountsPerTenant: Admit lets perSecond jobs of a tenant through
// in one window and refuses the next, and a tenant's window does not
// count another's. The test does not know which second it runs in: it
// retries when the window moved on between its calls.
func TestAdmitCountsPerTenant(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for i := range 5 {
		a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
		var got []bool
		for range 4 {
			ok, err := s.store.Admit(ctx, a, 3)
			require.NoError(t, err)
			got = append(got, ok)
		}
		other, err := s.store.Admit(ctx, b, 1)
		require.NoError(t, err)
		keys, err := s.rdb.Keys(ctx, s.prefix+"rate:"+a+":*").Result()
		require.NoError(t, err)
		if len(keys) != 1 {
			continue // the window moved on mid-test: again, with new tenants
		}
		assert.Equal(t, []bool{true, true, true, false}, got)
		assert.True(t, other, "tenant b's window counted tenant a's jobs")
		ttl, err := s.rdb.PTTL(ctx, keys[0]).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "the window expires")
		return
	}
	t.Fatal("the window moved on in every try")
}
