package results_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	sub, err := s.nc.SubscribeSync(job.CancelSubject("c-1"))
	require.NoError(t, err)
	require.NoError(t, s.nc.Flush())

	canceled, err := s.store.Canceled(ctx, "c-1")
	require.NoError(t, err)
	assert.False(t, canceled)
	require.NoError(t, s.store.Cancel(ctx, "c-1"))
	canceled, err = s.store.Canceled(ctx, "c-1")
	require.NoError(t, err)
	assert.True(t, canceled)
	_, err = sub.NextMsg(10 * time.Second)
	require.NoError(t, err, "a cancel notification is published")
	ttl, err := s.rdb.PTTL(ctx, s.prefix+"cancel:c-1").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
}
