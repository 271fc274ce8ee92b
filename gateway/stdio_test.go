package gateway

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/testsvc"
)

// A stdio gateway acts as its one tenant only and takes no token.
func TestNewStdio(t *testing.T) {
	t.Parallel()
	ns := testsvc.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.Config{Tenant: "dev"})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	gw, err := NewStdio("dev", c, Config{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = gw.cfg.Auth.Authenticate(ctx, devToken)
	assert.ErrorIs(t, err, ErrUnauthorized, "no tokens over stdio")
	got, err := gw.cfg.Clients.Client(ctx, "dev")
	require.NoError(t, err)
	assert.Same(t, c, got)
	_, err = gw.cfg.Clients.Client(ctx, "other")
	assert.ErrorContains(t, err, "tenant dev only")
	assert.IsType(t, &MemSessions{}, gw.cfg.Sessions)

	_, err = NewStdio("dev", nil, Config{})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}
