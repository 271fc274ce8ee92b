package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
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

// fleetBroker is this process's secrets broker (a broker.Holder over
// --broker-policy, reloaded on SIGHUP). A nil *fleetBroker is a fleet
// without a broker.
type fleetBroker struct {
	*broker.Holder
	flags brokerFlags
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
	h, err := broker.Load(bf.policy, log)
	if err != nil {
		return nil, fmt.Errorf("--broker-policy: %w", err)
	}
	f := &fleetBroker{Holder: h, flags: *bf, limiter: limiter}
	if serve {
		if err := f.startServing(ctx, obs); err != nil {
			return nil, err
		}
	}
	log = log.With("component", "broker")
	log.Info("secrets broker policy loaded", "policy", bf.policy, "serving", serve, "secrets", len(h.Policy().Secrets()))
	// Registered before returning: a SIGHUP from now on reloads, never
	// ends the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if err := h.Reload(ctx); err != nil {
				log.Error("broker reload failed; the previous policy and secrets stay in force", "err", err)
				continue
			}
			log.Info("broker policy and secrets reloaded", "policy", bf.policy)
		}
	}()
	return f, nil
}

func (f *fleetBroker) startServing(ctx context.Context, obs *observability) error {
	cfg := broker.Config{Limiter: f.limiter,
		Tracer: obs.provider.TracerProvider().Tracer(broker.TracerName), Meter: obs.provider.MeterProvider().Meter(broker.TracerName)}
	var err error
	if f.flags.signingKey != "" {
		if cfg.SigningKey, err = broker.LoadSigningKey(f.flags.signingKey); err != nil {
			return fmt.Errorf("--broker-signing-key: %w", err)
		}
	}
	if cfg.RootCAs, err = brokerRootCAs(f.flags.caFile); err != nil {
		return err
	}
	return f.Serve(ctx, broker.ServeConfig{SecretsDir: f.flags.secretsDir, SecretsEnvPrefix: f.flags.secretsEnv, Broker: cfg})
}

// brokerRootCAs are the CAs the broker trusts: nil (the system's) without
// a CA file, else the system's and the file's.
func brokerRootCAs(caFile string) (*x509.CertPool, error) {
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
	return pool, nil
}

// brokerServer serves jobs for the worker (worker.Broker).
type brokerServer struct{ h *broker.Holder }

func (s brokerServer) Serve(ctx context.Context, ln net.Listener, j worker.BrokerJob) (*job.BrokerCalls, error) {
	return s.h.ServeJob(ctx, ln, broker.JobInfo{Tenant: j.Tenant, ID: j.ID, Grants: j.Grants, Deadline: j.Deadline})
}

// server is the worker's view of f: nil without a broker.
func (f *fleetBroker) server() worker.Broker {
	if f == nil || !f.Serving() {
		return nil
	}
	return brokerServer{f.Holder}
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
