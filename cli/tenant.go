package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/internal/devstack"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/tenant"
)

// tenantCmd is `paddock tenant add|ls|rm`: tenant administration against
// the NATS server, with the admin credentials and the signing keys of the
// local `paddock up` (<data-dir>/auth), or --creds and --auth-dir.
func tenantCmd(g *globals) *cobra.Command {
	var authDir string
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Add, list and remove tenants: who may submit, with their own credentials and quotas",
		Long: `A tenant submits, reads and cancels only its own jobs: each tenant is a NATS
account of its own, which reaches the fleet only through imports of its own
subjects, so the NATS server keeps tenants apart by construction. Against
'paddock up' these commands need nothing more (they use <data-dir>/auth);
against a fleet of your own, give --creds (an admin user's) and --auth-dir (the
signing keys; see docs/operations.md for the nsc equivalent).`,
	}
	registerReplicas(cmd.PersistentFlags(), g)
	cmd.PersistentFlags().StringVar(&authDir, "auth-dir", "", "directory of the account's signing keys (default <data-dir>/auth)")
	dir := func() string {
		if authDir != "" {
			return authDir
		}
		return g.authDir()
	}
	cmd.AddCommand(tenantAddCmd(g, dir), tenantSetCmd(g), tenantLsCmd(g), tenantRmCmd(g, dir), tenantTokenCmd(g),
		tenantCredsCmd(g, dir), tenantMigrateCmd(g, dir))
	return cmd
}

func tenantAddCmd(g *globals, authDir func() string) *cobra.Command {
	var t tenant.Tenant
	var out string
	cmd := &cobra.Command{
		Use:   "add NAME --out FILE",
		Short: "Create a tenant and write its credentials file",
		Example: `  paddock tenant add acme --max-queued 1000 --max-running 8 --rate 20 --out acme.creds
  paddock --creds acme.creds submit --wait -- 'echo hi'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t.Name = args[0]
			if err := t.Validate(); err != nil {
				return err
			}
			if out == "" {
				return errors.New("--out FILE is required: where to write the tenant's credentials (0600)")
			}
			return withAdmin(cmd.Context(), g, authDir(), func(ad *tenant.Admin) error {
				_, creds, err := ad.Add(cmd.Context(), t)
				if errors.Is(err, tenant.ErrExists) {
					return fmt.Errorf("%w (change its quotas with paddock tenant set)", err)
				}
				if err == nil {
					err = tenant.WriteCreds(out, creds)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "tenant %s added; credentials in %s (keep them secret)\nsubmit as it: paddock --creds %s submit --wait -- 'echo hi'\n", t.Name, out, out)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	quotaFlags(fs, &t)
	fs.StringVar(&out, "out", "", "`file` to write the tenant's credentials to (0600)")
	return cmd
}

func tenantSetCmd(g *globals) *cobra.Command {
	var q tenant.Tenant
	cmd := &cobra.Command{
		Use:     "set NAME [--max-queued N] [--max-running N] [--rate N]",
		Short:   "Change a tenant's quotas (the schedulers apply them at once; its credentials stay)",
		Example: `  paddock tenant set acme --max-queued 5000 --rate 0   # 0: no limit`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			return withAdmin(cmd.Context(), g, "", func(ad *tenant.Admin) error {
				t, err := ad.Set(cmd.Context(), args[0], func(t *tenant.Tenant) {
					if fl.Changed("max-queued") {
						t.MaxQueued = q.MaxQueued
					}
					if fl.Changed("max-running") {
						t.MaxRunning = q.MaxRunning
					}
					if fl.Changed("rate") {
						t.Rate = q.Rate
					}
					if fl.Changed("max-stored-bytes") {
						t.MaxStored = q.MaxStored
					}
				})
				if err != nil {
					return err
				}
				return printTenants(g.stdout, []tenant.Tenant{t})
			})
		},
	}
	fs := cmd.Flags()
	quotaFlags(fs, &q)
	return cmd
}

// quotaFlags are the quota flags of tenant add and set, into t.
func quotaFlags(fs *pflag.FlagSet, t *tenant.Tenant) {
	fs.Int64Var(&t.MaxQueued, "max-queued", 0, "at most this many jobs waiting or running; the next submit is refused (0: no limit)")
	fs.IntVar(&t.MaxRunning, "max-running", 0, "at most this many jobs in the queue or running at once; more wait their turn (0: the scheduler's default)")
	fs.IntVar(&t.Rate, "rate", 0, "at most this many jobs scheduled per second; more are rejected (0: no limit)")
	fs.Int64Var(&t.MaxStored, "max-stored-bytes", 0, "size of each of the tenant's buckets (kept output and artifacts; uploads); when full, output is not kept and keep/artifacts jobs are rejected (0: the scheduler's --tenant-max-stored-bytes)")
}

func tenantLsCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the tenants and their quotas",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAdmin(cmd.Context(), g, "", func(ad *tenant.Admin) error {
				ts, err := ad.List(cmd.Context())
				if err != nil {
					return err
				}
				if output == "json" {
					return printJSONL(g.stdout, ts)
				}
				return printTenants(g.stdout, ts)
			})
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func printTenants(w io.Writer, ts []tenant.Tenant) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMAX-QUEUED\tMAX-RUNNING\tRATE\tMAX-STORED\tCREATED")
	limit := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, limit(t.MaxQueued), limit(int64(t.MaxRunning)), limit(int64(t.Rate)),
			limit(t.MaxStored), t.CreatedAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

func tenantRmCmd(g *globals, authDir func() string) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a tenant: its credentials stop working at once (live connections are closed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd.Context(), g, authDir(), func(ad *tenant.Admin) error {
				if err := ad.Remove(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "tenant %s removed; its credentials and gateway tokens are revoked (its stream %s keeps any backlog)\n", args[0], job.JobsStream(args[0]))
				return nil
			})
		},
	}
}

// withAdmin runs fn with a tenant.Admin over an admin connection (admin
// credentials: adminCreds) and the signing keys in authDir ("" for what
// needs none).
func withAdmin(ctx context.Context, g *globals, authDir string, fn func(*tenant.Admin) error) error {
	creds, err := g.adminCreds()
	if err != nil {
		return err
	}
	return withAdminAs(ctx, g, creds, authDir, fn)
}

// withAdminAs is withAdmin with the admin credentials creds.
func withAdminAs(ctx context.Context, g *globals, creds, authDir string, fn func(*tenant.Admin) error) error {
	nc, err := g.dialAdmin(ctx, creds)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ad, err := newAdmin(ctx, g, js, authDir, nil)
	if err != nil {
		return err
	}
	return fn(ad)
}

// newAdmin is the tenant.Admin of js, with the signing keys of authDir (a
// when the caller holds them), creating a tenant's streams with the
// default stream config and pushing accounts over a connection like the
// CLI's.
func newAdmin(ctx context.Context, g *globals, js jetstream.JetStream, authDir string, a *tenant.Authority) (*tenant.Admin, error) {
	if err := tenant.EnsureBuckets(ctx, js, g.replicas); err != nil {
		return nil, replicasHint(err, g.replicas)
	}
	return tenant.NewAdmin(ctx, js, tenant.AdminConfig{AuthDir: authDir, Authority: a, Dial: g.dialAdmin,
		Streams: func(ctx context.Context, t tenant.Tenant) error {
			err := results.EnsureTenant(ctx, js, results.StreamConfig{Replicas: g.replicas}, t.Name, t.MaxQueued, t.MaxStored)
			return replicasHint(err, g.replicas)
		}})
}

// dialAdmin connects as the tenant administration, with creds.
func (g *globals) dialAdmin(ctx context.Context, creds string) (*nats.Conn, error) {
	return g.connectAs(ctx, "paddock-tenant-admin", creds, "")
}

// registryTenants is the scheduler's TenantSource: the default tenant,
// plus every tenant of the registry as it changes.
type registryTenants struct {
	reg *tenant.Registry
	log *slog.Logger
}

func newRegistryTenants(ctx context.Context, nc *nats.Conn, log *slog.Logger) (*registryTenants, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	reg, err := tenant.NewRegistry(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("tenant registry: %w", err)
	}
	return &registryTenants{reg: reg, log: log}, nil
}

func (r *registryTenants) Watch(ctx context.Context, fn func(scheduler.Quota, bool)) error {
	fn(scheduler.Quota{Tenant: job.DefaultTenant}, false)
	return r.reg.WatchFunc(ctx, func(e tenant.Event) {
		switch {
		case e.Err != nil:
			r.log.Warn("tenant record ignored", "tenant", e.Name, "err", e.Err)
		case e.Op == tenant.EventPut:
			fn(scheduler.Quota{Tenant: e.Tenant.Name, MaxQueued: e.Tenant.MaxQueued, MaxRunning: e.Tenant.MaxRunning, Rate: e.Tenant.Rate, MaxStored: e.Tenant.MaxStored}, false)
		case e.Op == tenant.EventDelete:
			fn(scheduler.Quota{Tenant: e.Name}, true)
		}
	})
}

// authCmd is `paddock auth init`: the credentials of a fleet of your own
// (Compose, Kubernetes), in the layout `paddock up` keeps.
func authCmd(g *globals) *cobra.Command {
	var resolverDir string
	cmd := &cobra.Command{Use: "auth", Short: "Credentials of a fleet: paddock auth init"}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Create (or complete) <data-dir>/auth: signing keys, service and dev credentials, the NATS server config, the Redis password and ACL",
		Long: `init writes, under <data-dir>/auth (0700; every file 0600), what a fleet needs
to run authenticated, keeping whatever exists:
  operator/account/system keys and JWTs     sign every credential (keep them offline)
  creds/{admin,scheduler,worker,gateway,sys,dev}.creds
  gateway.nk                                the gateway's scoped signing key (acts as tenants only)
  tenants/<tenant>.jwt                      each tenant's own NATS account (its imports of its subjects)
  nats-auth.conf                            include it in nats-server.conf (operator mode)
  redis.password, redis-users.acl           redis-server --aclfile redis-users.acl
Rotation: docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return authInit(g, resolverDir) },
	}
	initCmd.Flags().StringVar(&resolverDir, "nats-resolver-dir", "/data/jwt", "where the NATS server keeps account JWTs (absolute, a path in the NATS server's filesystem)")
	cmd.AddCommand(initCmd)
	return cmd
}

func authInit(g *globals, resolverDir string) error {
	au, err := devstack.LoadOrCreateAuth(g.dataDirPath())
	if err == nil {
		err = au.WriteServerFiles(resolverDir)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "credentials in %s (0600): creds/{admin,scheduler,worker,gateway,sys,dev}.creds, gateway.nk, tenants/ (one NATS account per tenant), nats-auth.conf, redis.password, redis-users.acl\n", au.Dir)
	return nil
}
