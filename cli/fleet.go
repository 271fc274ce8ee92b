package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/internal/failwatch"
	"github.com/paddockhq/paddock/scheduler"
)

// fleetFlags are the flags of `paddock fleet`.
type fleetFlags struct {
	output                 string
	systemCreds, systemURL string
	sentinels              []string
	sentinelMaster         string
}

// fleetCmd is `paddock fleet`: the operator's view of the fleet
// (scheduler.OperatorView).
func fleetCmd(g *globals) *cobra.Command {
	var f fleetFlags
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Show the fleet to its operator: hosts and workers, Redis's and the NATS cluster's health and roles, failovers, rescues",
		Long: `fleet reads the fleet as its operator sees it: per host its workers, their
concurrency, running jobs, warm pool and heartbeat age (every worker's heartbeat in
Redis); Redis's role, replicas and master link, and which master each Sentinel
(--sentinels) names; the NATS servers and the JetStream meta leader (over the
system account: --system-creds, default <data-dir>/auth/creds/sys.creds), and the
leader and followers of every Paddock stream (as the admin: --creds, default
<data-dir>/auth/creds/admin.creds); the Redis master changes and stream leader
changes the fleet saw, and the runs it rescued. It names hosts: it is for
operators, never for tenants (a tenant's GET /v1/fleet is anonymous).
docs/operations.md, "Fleet view". Exit status 1 when Redis or NATS is not
healthy (after printing).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, err := readFleet(cmd.Context(), g, &f)
			if err != nil {
				return err
			}
			if f.output == "json" {
				err = json.NewEncoder(g.stdout).Encode(fl)
			} else {
				printFleet(g.stdout, fl)
			}
			if err == nil && (!fl.Redis.OK || !fl.NATS.OK) {
				err = &exitCodeError{code: exitFailure}
			}
			return err
		},
	}
	fs := cmd.Flags()
	addOutputFlag(cmd, &f.output)
	fs.StringVar(&f.systemCreds, "system-creds", "", "credentials `file` of a system account user, to ping the NATS servers (default <data-dir>/auth/creds/sys.creds when it exists)")
	fs.StringVar(&f.systemURL, "system-nats-url", "", "NATS URL for the system account's connection (default --nats-url)")
	fs.StringSliceVar(&f.sentinels, "sentinels", nil, "host:port of each Redis Sentinel to ask which master it names (default: a redis+sentinel:// --redis-url's hosts)")
	fs.StringVar(&f.sentinelMaster, "sentinel-master", "", "the Sentinels' master name (default: a Sentinel --redis-url's)")
	return cmd
}

// readFleet connects as the operator and reads the fleet once.
func readFleet(ctx context.Context, g *globals, f *fleetFlags) (scheduler.OperatorFleet, error) {
	sentinels, master := f.sentinels, f.sentinelMaster
	fo, ok := sentinelURL(g.redisURL)
	if ok {
		if len(sentinels) == 0 {
			sentinels = fo.SentinelAddrs
		}
		master = orString(master, fo.MasterName)
	}
	if len(sentinels) > 0 && master == "" {
		return scheduler.OperatorFleet{}, errors.New("--sentinels needs --sentinel-master NAME (the master's name the Sentinels monitor)")
	}
	rdb, err := connectRedis(ctx, g, g.redisURL)
	if err != nil {
		return scheduler.OperatorFleet{}, err
	}
	defer rdb.Close()
	cfg := scheduler.OperatorViewConfig{MasterName: master, Sentinels: sentinelClients(sentinels, fo)}
	defer closeSentinels(cfg.Sentinels)
	admin, sys := g.operatorCreds(g.auth.creds, f.systemCreds)
	closeNATS := fleetNATS(ctx, g, admin, sys, f.systemURL, &cfg)
	defer closeNATS()
	v, err := scheduler.NewOperatorView(rdb, cfg)
	if err != nil {
		return scheduler.OperatorFleet{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return v.Read(rctx)
}

// fleetNATS gives cfg the admin's JetStream (adminCreds; "": the URL's
// own user, if any) and the system account's server pings (sysCreds or
// sysURL; neither: no server list), each as far as it connects (a part
// that does not is the view's NATS error). The function it returns closes
// the connections.
func fleetNATS(ctx context.Context, g *globals, adminCreds, sysCreds, sysURL string, cfg *scheduler.OperatorViewConfig) func() {
	var closers []func()
	if nc, err := g.connectAs(ctx, "paddock-fleet", adminCreds, ""); err != nil {
		g.logger.Warn("fleet: no NATS stream view", "err", err)
	} else if js, err := jetstream.New(nc); err == nil {
		closers = append(closers, nc.Close)
		cfg.JetStream = js
	}
	if sysCreds != "" || sysURL != "" {
		nc, err := client.Connect(ctx, client.ConnectConfig{URL: orString(sysURL, g.natsURL), Name: "paddock-fleet-sys", Creds: sysCreds,
			TLSCA: g.auth.tlsCA, TLSCert: g.auth.tlsCert, TLSKey: g.auth.tlsKey, Logger: g.logger})
		if err != nil {
			g.logger.Warn("fleet: cannot connect as the system account; no server list", "err", err)
		} else {
			closers = append(closers, nc.Close)
			cfg.Servers = scheduler.NATSServers{Conn: nc}
		}
	}
	return func() {
		for _, c := range closers {
			c()
		}
	}
}

// operatorCreds are the operator's NATS credentials: admin (--creds, else
// the local admin.creds) and system (sys, else the local sys.creds).
func (g *globals) operatorCreds(admin, sys string) (string, string) {
	if admin == "" && g.auth.nkey == "" {
		admin = g.localCreds("admin")
	}
	return admin, orString(sys, g.localCreds("sys"))
}

// sentinelClients are clients of the Sentinels at addrs, with the
// Sentinels' own credentials of a Sentinel URL (fo, nil for none).
func sentinelClients(addrs []string, fo *redis.FailoverOptions) []scheduler.Sentinel {
	var out []scheduler.Sentinel
	for _, addr := range addrs {
		opt := &redis.Options{Addr: addr, DialTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second}
		if fo != nil {
			opt.Username, opt.Password, opt.TLSConfig = fo.SentinelUsername, fo.SentinelPassword, fo.TLSConfig
		}
		out = append(out, scheduler.Sentinel{Addr: addr, Client: redis.NewSentinelClient(opt)})
	}
	return out
}

func closeSentinels(ss []scheduler.Sentinel) {
	for _, s := range ss {
		_ = s.Client.Close()
	}
}

// sentinelURL is the Sentinels and master of a Sentinel --redis-url
// (internal/redisurl: redis+sentinel://…/<master>, redis-sentinel://…?master=).
func sentinelURL(raw string) (*redis.FailoverOptions, bool) {
	u, err := parseRedisURL(raw)
	if err != nil || u.Failover == nil {
		return nil, false
	}
	return u.Failover, true
}

func orString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startFailWatch starts the failover watcher of a scheduler (js: it
// watches the streams' leaders too) or a worker (js nil: Redis only), and
// reports the NATS connection's reconnects; the function it returns stops
// both.
func startFailWatch(ctx context.Context, rdb redis.UniversalClient, nc *nats.Conn, js jetstream.JetStream, obs *observability, log *slog.Logger) func() {
	w := failwatch.New(rdb, failwatch.Config{JetStream: js, Metrics: obs.metrics, Logger: log})
	_ = w.Start(ctx)
	reg, err := obs.metrics.RegisterReconnects(func() uint64 { return nc.Stats().Reconnects })
	return func() {
		w.Stop()
		if err == nil {
			_ = reg.Unregister()
		}
	}
}

// printFleet prints the fleet for a person.
func printFleet(w io.Writer, f scheduler.OperatorFleet) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tWORKERS\tALIVE\tCONCURRENCY\tRUNNING\tPOOL\tHEARTBEAT")
	for _, h := range f.Hosts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s ago\n", h.Host, h.Workers, h.WorkersAlive, h.Concurrency, h.Running, h.Pool, ms(h.HeartbeatAgeMS))
	}
	if len(f.Hosts) == 0 {
		fmt.Fprintln(tw, "(no worker beat within the hour)")
	}
	fmt.Fprintln(tw, "\nWORKER\tHOST\tPID\tALIVE\tCONCURRENCY\tRUNNING\tPOOL\tHEARTBEAT")
	for _, wk := range f.Workers {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s ago\n", wk.ID, wk.Host, wk.PID, yesNo(wk.Alive), wk.Concurrency, wk.Running, wk.Pool, ms(wk.HeartbeatAgeMS))
	}
	tw.Flush()
	printRedis(w, f.Redis)
	printNATS(w, f.NATS)
	fo := f.Failovers
	fmt.Fprintf(w, "\nfailovers  Redis master changes %d%s; stream leader changes %d%s\n", fo.RedisMasterChanges, last(fo.RedisLastChange),
		fo.StreamLeaderChanges, last(fo.StreamLastChange))
	fmt.Fprintf(w, "rescued    %d runs of dead workers run again\n", f.Rescued)
}

func printRedis(w io.Writer, r scheduler.RedisHealth) {
	if !r.OK {
		fmt.Fprintf(w, "\nredis      DOWN: %s\n", r.Error)
	} else {
		link := ""
		if r.MasterLink != "" {
			link = ", master link " + r.MasterLink
		}
		fmt.Fprintf(w, "\nredis      ok, role %s, %d replica(s)%s\n", r.Role, r.ConnectedReplicas, link)
		for _, rep := range r.Replicas {
			fmt.Fprintf(w, "  replica  %s\n", rep)
		}
	}
	for _, s := range r.Sentinels {
		if s.Error != "" {
			fmt.Fprintf(w, "  sentinel %s: %s\n", s.Addr, s.Error)
		} else {
			fmt.Fprintf(w, "  sentinel %s names master %s\n", s.Addr, s.Master)
		}
	}
}

func printNATS(w io.Writer, n scheduler.NATSHealth) {
	state := "ok"
	if !n.OK {
		state = "NOT OK: " + n.Error
	}
	fmt.Fprintf(w, "nats       %s; %d server(s) answered, meta leader %s\n", state, len(n.Servers), orString(n.MetaLeader, "?"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(n.Servers) > 0 {
		fmt.Fprintln(tw, "SERVER\tCLUSTER\tVERSION\tCONNECTIONS\tROUTES\tJETSTREAM\tUPTIME")
		for _, s := range n.Servers {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, s.Cluster, s.Version, s.Connections, s.Routes, yesNo(s.JetStream),
				time.Duration(s.UptimeS)*time.Second)
		}
		fmt.Fprintln(tw)
	}
	if len(n.Streams) > 0 {
		fmt.Fprintln(tw, "STREAM\tLEADER\tMESSAGES\tFOLLOWERS")
	}
	for _, s := range n.Streams {
		var fs []string
		for _, r := range s.Replicas {
			st := "current"
			switch {
			case r.Offline:
				st = "OFFLINE"
			case !r.Current:
				st = fmt.Sprintf("LAGGING %d ops", r.Lag)
			}
			fs = append(fs, r.Name+" "+st)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Name, orString(s.Leader, "NONE"), s.Messages, strings.Join(fs, ", "))
	}
	tw.Flush()
	if n.StreamsPartial {
		fmt.Fprintln(w, "(more streams than shown: -o json has the first 1000)")
	}
}

func ms(v int64) string {
	return (time.Duration(v) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func last(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " (last " + t.Format(time.RFC3339) + ")"
}
