package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/broker"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// brokerFlags configure the secrets broker (docs/broker.md): the
// scheduler checks jobs' grants against the policy, the worker serves them.
type brokerFlags struct {
	policy     string
	secretsDir string
	secretsEnv string
	signingKey string
	caFile     string
}

func (b *brokerFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&b.policy, "broker-policy", "", "secrets broker policy `file` (docs/broker.md): grants per tenant; empty: no broker, and a job naming a grant is rejected. Reloaded on SIGHUP")
	fs.StringVar(&b.secretsDir, "broker-secrets-dir", "", "worker: `directory` of the broker's secrets, one 0600 file per secret (reloaded on SIGHUP)")
	fs.StringVar(&b.secretsEnv, "broker-secrets-env", "", "worker: take the broker's secrets from this worker's environment, secret a-b as <`PREFIX`>A_B")
	fs.StringVar(&b.caFile, "broker-ca-file", "", "worker: PEM `file` of CA certificates the broker trusts besides the system's (a private CA of internal services)")
	fs.StringVar(&b.signingKey, "broker-signing-key", "", "worker: Ed25519 PEM `file` signing the broker's scoped tokens (default: a key made at start; `paddock broker jwks` prints its public key set)")
}

func (b *brokerFlags) check() error {
	switch {
	case b.policy == "" && (b.secretsDir != "" || b.secretsEnv != "" || b.signingKey != "" || b.caFile != ""):
		return errors.New("--broker-secrets-dir, --broker-secrets-env, --broker-signing-key and --broker-ca-file need --broker-policy")
	case b.secretsDir != "" && b.secretsEnv != "":
		return errors.New("give one secret source: --broker-secrets-dir or --broker-secrets-env, not both")
	}
	return nil
}

// secretSource is a broker.Secrets that can be read again.
type secretSource interface {
	broker.Secrets
	Reload(ctx context.Context) error
}

// fleetBroker is this process's secrets broker: the policy in force (for
// the scheduler's grant check) and, in a worker, the broker serving jobs.
// A nil *fleetBroker is a fleet without a broker.
type fleetBroker struct {
	flags   brokerFlags
	log     *slog.Logger
	mu      sync.Mutex
	policy  *broker.Policy
	secrets secretSource
	b       *broker.Broker
	// limiter holds the grants' rate buckets: on the fleet's Redis for a
	// worker (shared by every worker), nil (in process) otherwise.
	limiter broker.Limiter
}

// startBroker loads the policy and, with serve (a worker), the secret
// source and the broker; it reloads them on SIGHUP until ctx ends. Nil
// without --broker-policy.
func startBroker(ctx context.Context, bf *brokerFlags, serve bool, limiter broker.Limiter, obs *observability, log *slog.Logger) (*fleetBroker, error) {
	if err := bf.check(); err != nil {
		return nil, err
	}
	if bf.policy == "" {
		return nil, nil
	}
	pol, err := broker.LoadPolicy(bf.policy)
	if err != nil {
		return nil, fmt.Errorf("--broker-policy: %w", err)
	}
	f := &fleetBroker{flags: *bf, log: log.With("component", "broker"), policy: pol, limiter: limiter}
	if serve {
		if err := f.startServing(ctx, obs); err != nil {
			return nil, err
		}
	}
	f.log.Info("secrets broker policy loaded", "policy", bf.policy, "serving", serve, "secrets", len(pol.Secrets()))
	// Registered before returning: a SIGHUP from now on reloads, never
	// ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go f.reloadOnHUP(ctx, hup)
	return f, nil
}

func (f *fleetBroker) startServing(ctx context.Context, obs *observability) error {
	var err error
	switch {
	case f.flags.secretsDir != "":
		f.secrets, err = broker.NewDirSecrets(ctx, f.flags.secretsDir)
	default:
		// No source flag: the environment, with the documented prefix (a
		// policy that names no secret reads nothing from it).
		prefix := f.flags.secretsEnv
		if prefix == "" {
			prefix = "PADDOCK_SECRET_"
		}
		f.secrets, err = broker.NewEnvSecrets(ctx, prefix)
	}
	if err != nil {
		return fmt.Errorf("broker secrets: %w", err)
	}
	var key ed25519.PrivateKey
	if f.flags.signingKey != "" {
		if key, err = broker.LoadSigningKey(f.flags.signingKey); err != nil {
			return fmt.Errorf("--broker-signing-key: %w", err)
		}
	}
	hc, err := brokerHTTPClient(f.flags.caFile)
	if err != nil {
		return err
	}
	f.b, err = broker.New(f.policy, f.secrets, broker.Config{Logger: f.log, SigningKey: key, HTTPClient: hc, Limiter: f.limiter,
		Tracer: obs.provider.TracerProvider().Tracer(broker.TracerName), Meter: obs.provider.MeterProvider().Meter(broker.TracerName)})
	if err != nil {
		return err
	}
	if err := f.b.CheckSecrets(ctx); err != nil {
		// Jobs using other grants still work: say it loudly, do not stop.
		f.log.Error("secrets the broker policy names are missing; calls needing them will fail with rule secret", "err", err)
	}
	return nil
}

// brokerHTTPClient is the broker's client: nil (its default) without a CA
// file, else one that trusts the system's CAs and the file's.
func brokerHTTPClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--broker-ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--broker-ca-file %s: no PEM certificate in it", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	t.MaxResponseHeaderBytes = 1 << 20
	return &http.Client{Transport: t}, nil
}

// reloadOnHUP reads the secrets, then the policy, again on every SIGHUP; a
// failed reload keeps what was in force.
func (f *fleetBroker) reloadOnHUP(ctx context.Context, hup chan os.Signal) {
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if err := f.reload(ctx); err != nil {
			f.log.Error("broker reload failed; the previous policy and secrets stay in force", "err", err)
			continue
		}
		f.log.Info("broker policy and secrets reloaded", "policy", f.flags.policy)
	}
}

func (f *fleetBroker) reload(ctx context.Context) error {
	if f.secrets != nil {
		if err := f.secrets.Reload(ctx); err != nil {
			return err
		}
	}
	pol, err := broker.LoadPolicy(f.flags.policy)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.policy = pol
	f.mu.Unlock()
	if f.b != nil {
		if err := f.b.SetPolicy(pol); err != nil {
			return err
		}
		if err := f.b.CheckSecrets(ctx); err != nil {
			f.log.Error("secrets the broker policy names are missing; calls needing them will fail with rule secret", "err", err)
		}
	}
	return nil
}

// Check is the scheduler's grant check (scheduler.GrantChecker) against
// the policy in force.
func (f *fleetBroker) Check(tenant string, names []string) error {
	f.mu.Lock()
	p := f.policy
	f.mu.Unlock()
	return p.Check(tenant, names)
}

// brokerServer serves jobs for the worker (worker.Broker).
type brokerServer struct{ b *broker.Broker }

func (s brokerServer) Serve(ctx context.Context, ln net.Listener, j worker.BrokerJob) (*job.BrokerCalls, error) {
	log := &broker.CallLog{Max: job.MaxBrokerCalls}
	err := s.b.Serve(ctx, ln, broker.JobInfo{Tenant: j.Tenant, ID: j.ID, Grants: j.Grants, Deadline: j.Deadline, Calls: log})
	calls := log.Calls()
	out := &job.BrokerCalls{Calls: make([]job.BrokerCall, len(calls)), Dropped: log.Dropped()}
	for i, c := range calls {
		out.Calls[i] = job.BrokerCall{Start: c.Start.UTC(), Grant: c.Grant, Method: c.Method, Path: c.Path, QueryKeys: c.QueryKeys,
			Status: c.Status, Rule: string(c.Rule), Error: c.Error, BytesIn: c.BytesIn, BytesOut: c.BytesOut,
			Redacted: c.Redacted, DurationMS: c.DurationMS}
	}
	return out, err
}

// server is the worker's view of f: nil without a broker.
func (f *fleetBroker) server() worker.Broker {
	if f == nil || f.b == nil {
		return nil
	}
	return brokerServer{f.b}
}

// checker is the scheduler's view of f: nil without a broker.
func (f *fleetBroker) checker() scheduler.GrantChecker {
	if f == nil {
		return nil
	}
	return f
}

func brokerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "broker", Short: "Secrets broker tools (docs/broker.md)"}
	var key string
	jwks := &cobra.Command{
		Use:   "jwks",
		Short: "Print the JSON Web Key Set that verifies the broker's scoped tokens",
		Long: `jwks prints the public key set of the broker's signing key, for downstream
services that verify the scoped tokens it mints (publish it, e.g. at
/.well-known/jwks.json). Give the same key file to every worker with
--broker-signing-key.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k, err := broker.LoadSigningKey(key)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "%s\n", broker.JWKS(k))
			return err
		},
	}
	jwks.Flags().StringVar(&key, "broker-signing-key", "", "Ed25519 PEM `file` of the workers' --broker-signing-key")
	_ = jwks.MarkFlagRequired("broker-signing-key")
	cmd.AddCommand(jwks)
	return cmd
}
