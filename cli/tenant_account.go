package cli

import (
	"context"
	"fmt"
	"log/slog"

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
			return withAdmin(cmd.Context(), g, authDir(), func(ad *tenant.Admin) error {
				creds, err := ad.Reissue(cmd.Context(), args[0])
				if err == nil {
					err = tenant.WriteCreds(out, creds)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "new credentials of tenant %s in %s (keep them secret); its previous credentials are revoked\n", args[0], out)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "`file` to write the tenant's credentials to (0600)")
	return cmd
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
			log := slog.New(slog.NewTextHandler(g.stderr, nil))
			return withAdmin(cmd.Context(), g, authDir(), func(ad *tenant.Admin) error {
				return migrateTenants(cmd.Context(), ad, log)
			})
		},
	}
}

// migrateTenants moves every tenant of an older version into its own
// account (tenant.Admin.Migrate) and logs each with what to do.
func migrateTenants(ctx context.Context, ad *tenant.Admin, log *slog.Logger) error {
	moved, err := ad.Migrate(ctx)
	for _, t := range moved {
		log.Warn("tenant moved into its own NATS account; its old credentials are revoked: issue new ones with `paddock tenant creds "+t.Name+" --out FILE`",
			"tenant", t.Name, "account", t.Account)
	}
	return err
}

// upTenants are `paddock up`'s tenants, with its authority: the dev
// tenant registered (devstack.Auth.EnsureDevTenant), and tenants of an
// older version moved into their own accounts.
func upTenants(ctx context.Context, g *globals, s *stack, au *devstack.Auth, log *slog.Logger) error {
	ad, err := newAdmin(ctx, g, s.js, au.Dir, au.Authority)
	if err != nil {
		return fmt.Errorf("tenant registry: %w", err)
	}
	if err := au.EnsureDevTenant(ctx, ad.Registry(), log); err != nil {
		return err
	}
	if err := migrateTenants(ctx, ad, log); err != nil {
		return fmt.Errorf("move tenants into their own accounts: %w", err)
	}
	return nil
}
