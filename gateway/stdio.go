package gateway

import (
	"context"
	"fmt"

	"github.com/paddockhq/paddock/client"
)

// NewStdio returns a Gateway that acts as tenant only, through c, for
// ServeStdio (`paddock mcp`): it takes no tokens (every bearer is
// refused), and its sessions are in memory unless cfg.Sessions is set.
// cfg's Auth and Clients are replaced. Closing c is the caller's.
func NewStdio(tenant string, c *client.Client, cfg Config) (*Gateway, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	cfg.Auth = AuthFunc(func(context.Context, string) (Identity, error) {
		return Identity{}, fmt.Errorf("%w: stdio has no tokens", ErrUnauthorized)
	})
	cfg.Clients = oneClient{tenant: tenant, c: c}
	if cfg.Sessions == nil {
		cfg.Sessions = NewMemSessions()
	}
	return New(cfg)
}

// oneClient is the Clients of a stdio gateway: one tenant's client only.
type oneClient struct {
	tenant string
	c      *client.Client
}

func (o oneClient) Client(_ context.Context, t string) (*client.Client, error) {
	if t != o.tenant {
		return nil, fmt.Errorf("gateway: this server acts as tenant %s only", o.tenant)
	}
	return o.c, nil
}
