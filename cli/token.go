package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/tenant"
)

// tenantTokenCmd is `paddock tenant token NAME`: bearer tokens of the
// gateway (HTTP API and MCP), mapped to a tenant.
func tenantTokenCmd(g *globals) *cobra.Command {
	var label, revoke, output string
	var list, revokeAll bool
	cmd := &cobra.Command{
		Use:   "token NAME [--label TEXT] | --list | --revoke ID | --revoke-all",
		Short: "Issue a bearer token of a tenant for the gateway's HTTP API and MCP server (printed once), or list and revoke them",
		Long: `token prints a new bearer token of tenant NAME. The gateway keeps only its
SHA-256: the token cannot be shown again, so store it now. A request with it acts
as the tenant, with the tenant's own NATS permissions.`,
		Example: `  paddock tenant token dev --label laptop
  curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/v1/jobs/ID
  paddock tenant token dev --list
  paddock tenant token dev --revoke 3f2a9c1b0d4e`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withTokens(cmd.Context(), g, func(ts *tenant.Tokens) error {
				ctx, name := cmd.Context(), args[0]
				switch {
				case list:
					return printTokens(g, ctx, ts, name, output)
				case revoke != "":
					if err := ts.Revoke(ctx, name, revoke); err != nil {
						return err
					}
					fmt.Fprintf(g.stdout, "token %s of tenant %s revoked\n", revoke, name)
					return nil
				case revokeAll:
					n, err := ts.RevokeTenant(ctx, name)
					if err != nil {
						return err
					}
					fmt.Fprintf(g.stdout, "%d token(s) of tenant %s revoked\n", n, name)
					return nil
				}
				secret, tok, err := ts.Issue(ctx, name, label)
				if err != nil {
					return err
				}
				fmt.Fprintln(g.stdout, secret)
				fmt.Fprintf(g.stderr, "paddock: token %s of tenant %s: shown once, store it now (revoke: paddock tenant token %s --revoke %s)\n", tok.ID, name, name, tok.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&label, "label", "", "what the token is for (shown by --list)")
	cmd.Flags().BoolVar(&list, "list", false, "list the tenant's tokens (their ids and labels, never the secrets)")
	cmd.Flags().StringVar(&revoke, "revoke", "", "revoke the token with this `id`")
	cmd.Flags().BoolVar(&revokeAll, "revoke-all", false, "revoke every token of the tenant")
	cmd.MarkFlagsMutuallyExclusive("list", "revoke", "revoke-all", "label")
	addOutputFlag(cmd, &output)
	return cmd
}

func printTokens(g *globals, ctx context.Context, ts *tenant.Tokens, name, output string) error {
	toks, err := ts.List(ctx, name)
	if err != nil {
		return err
	}
	if output == "json" {
		return printJSONL(g.stdout, toks)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCREATED\tLABEL")
	for _, t := range toks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.ID, t.CreatedAt.UTC().Format(time.RFC3339), t.Label)
	}
	return tw.Flush()
}

// withTokens runs fn with the token store, as the admin.
func withTokens(ctx context.Context, g *globals, fn func(*tenant.Tokens) error) error {
	return withAdmin(ctx, g, "", func(ad *tenant.Admin) error {
		ts, err := ad.Tokens(ctx)
		if err != nil {
			return err
		}
		return fn(ts)
	})
}
