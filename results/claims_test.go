package results_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClaim(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	holder, ok, err := s.store.Claim(ctx, "cl-1", "owner-a")
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "owner-a", holder)
	holder, ok, err = s.store.Claim(ctx, "cl-1", "owner-a")
	require.NoError(t, err)
	assert.True(t, ok, "the holder keeps its claim")
	assert.Equal(t, "owner-a", holder)
	holder, ok, err = s.store.Claim(ctx, "cl-1", "owner-b")
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, "owner-a", holder)
}
