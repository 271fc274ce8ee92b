package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/tenant"
)

// tenantCredsCmd is `paddock tenant creds NAME --out FILE`: new
// credentials for an existing tenant (after a migration, or a leak).
func tenantCredsCmd(g *globals, authDir func() string) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "creds NAME --out FILE",
		Short: "Issue new credentials for a tenant; its previous credentials stop working",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("--out FILE is required: where to write the tenant's credentials (0600)")
			}
			return reissueTenant(cmd.Context(), g, authDir(), args[0], out)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "`file` to write the tenant's credentials to (0600)")
	return cmd
}

// reissueTenant revokes the tenant's current user and issues a new one in
// its own account (moving a tenant of an older version into it).
func reissueTenant(ctx context.Context, g *globals, authDir, name, out string) error {
	a, err := tenant.LoadAuthority(authDir)
	if err != nil {
		return fmt.Errorf("signing keys: %w", err)
	}
	return withAdmin(ctx, g, func(_ jetstream.JetStream, reg *tenant.Registry) error {
		t, err := reg.Get(ctx, name)
		if err != nil {
			return err
		}
		if _, err := a.Migrate(&t); err != nil {
			return err
		}
		if t.User != "" {
			if err := a.RevokeTenantUser(t.Name, t.User); err != nil {
				return err
			}
		}
		creds, err := issueTenantCreds(ctx, g, a, authDir, &t)
		if err != nil {
			return err
		}
		if err := reg.Put(ctx, t); err != nil {
			return err
		}
		if err := tenant.WriteCreds(out, creds); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "new credentials of tenant %s in %s (keep them secret); its previous credentials are revoked\n", name, out)
		return nil
	})
}

// tenantMigrateCmd is `paddock tenant migrate`: every tenant of an older
// version into its own account (`paddock up` does it at start).
func tenantMigrateCmd(g *globals, authDir func() string) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Move every tenant of an older version into its own NATS account (revokes their old credentials)",
		Long: `Tenants of versions before tenant accounts are users of the fleet's shared
NATS account, where subject permissions alone cannot stop a tenant from making
the server write into another tenant's streams. migrate gives each its own
account and revokes its old user; issue each tenant new credentials with
'paddock tenant creds NAME --out FILE'. Tenants that have their account are
left alone, so it is safe to run again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := tenant.LoadAuthority(authDir())
			if err != nil {
				return fmt.Errorf("signing keys: %w", err)
			}
			log := slog.New(slog.NewTextHandler(g.stderr, nil))
			return withAdmin(cmd.Context(), g, func(_ jetstream.JetStream, reg *tenant.Registry) error {
				return migrateTenants(cmd.Context(), g, a, authDir(), reg, log)
			})
		},
	}
}

// migrateTenants moves every registered tenant without an account into
// its own (tenant.Authority.Migrate), saves and pushes the authority, then
// updates their records. Each moved tenant is logged with what to do.
func migrateTenants(ctx context.Context, g *globals, a *tenant.Authority, authDir string, reg *tenant.Registry, log *slog.Logger) error {
	all, err := reg.List(ctx)
	if err != nil {
		return err
	}
	var moved []tenant.Tenant
	for _, t := range all {
		ok, err := a.Migrate(&t)
		if err != nil {
			return fmt.Errorf("tenant %s: %w", t.Name, err)
		}
		if ok {
			moved = append(moved, t)
		}
	}
	if len(moved) == 0 {
		return nil
	}
	if err := a.Save(authDir); err != nil {
		return err
	}
	if err := pushAccount(ctx, g, a, authDir); err != nil {
		return err
	}
	for _, t := range moved {
		if err := reg.Put(ctx, t); err != nil {
			return err
		}
		log.Warn("tenant moved into its own NATS account; its old credentials are revoked: issue new ones with `paddock tenant creds "+t.Name+" --out FILE`",
			"tenant", t.Name, "account", t.Account)
	}
	return nil
}

// migrateUpTenants is migrateTenants for `paddock up`, with its authority.
func migrateUpTenants(ctx context.Context, g *globals, s *stack, au *devstack.Auth, log *slog.Logger) error {
	reg, err := tenant.NewRegistry(ctx, s.js)
	if err != nil {
		return fmt.Errorf("tenant registry: %w", err)
	}
	return migrateTenants(ctx, g, au.Authority, au.Dir, reg, log)
}
