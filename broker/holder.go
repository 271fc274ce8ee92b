package broker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/paddockhq/paddock/job"
)

// DefaultSecretsEnvPrefix is the prefix of the secrets a Holder serving
// without a SecretsDir reads from its environment (EnvSecrets).
const DefaultSecretsEnvPrefix = "PADDOCK_SECRET_"

// Holder is a process's secrets broker over a policy file: the policy in
// force (Check, for the scheduler's grant check) and, once Serve has been
// called (a worker), the Broker serving jobs with the secrets of a
// directory or the environment. Reload reads the secrets and the policy
// again; a failed reload keeps what was in force. Safe for concurrent use.
type Holder struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	policy  *Policy
	secrets reloadable
	b       *Broker
}

// reloadable is a Secrets that can be read again (DirSecrets, EnvSecrets).
type reloadable interface {
	Secrets
	Reload(ctx context.Context) error
}

// ServeConfig is the serving side of a Holder.
type ServeConfig struct {
	// SecretsDir holds one 0600 file per secret (DirSecrets). Empty: the
	// environment, secret a-b as <SecretsEnvPrefix>A_B (EnvSecrets).
	SecretsDir string
	// SecretsEnvPrefix, default DefaultSecretsEnvPrefix.
	SecretsEnvPrefix string
	// Broker configures the broker (its Logger defaults to the Holder's).
	Broker Config
}

// Load reads the policy file at path (LoadPolicy) into a Holder that does
// not serve yet. log gets its reloads (component=broker; default
// slog.Default()).
func Load(path string, log *slog.Logger) (*Holder, error) {
	pol, err := LoadPolicy(path)
	if err != nil {
		return nil, err
	}
	return &Holder{path: path, log: cmp.Or(log, slog.Default()).With("component", "broker"), policy: pol}, nil
}

// Serving reports whether Serve has made the broker.
func (h *Holder) Serving() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.b != nil
}

// Broker is the broker serving jobs; nil before Serve.
func (h *Holder) Broker() *Broker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.b
}

// Serve opens the secret source and makes the broker over the policy in
// force. Secrets the policy names but the source lacks are logged, not
// refused: jobs using other grants still work. A second call does nothing.
func (h *Holder) Serve(ctx context.Context, cfg ServeConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.b != nil {
		return nil
	}
	var secrets reloadable
	var err error
	if cfg.SecretsDir != "" {
		secrets, err = NewDirSecrets(ctx, cfg.SecretsDir)
	} else {
		// A policy that names no secret reads nothing from it.
		secrets, err = NewEnvSecrets(ctx, cmp.Or(cfg.SecretsEnvPrefix, DefaultSecretsEnvPrefix))
	}
	if err != nil {
		return fmt.Errorf("broker secrets: %w", err)
	}
	cfg.Broker.Logger = cmp.Or(cfg.Broker.Logger, h.log)
	b, err := New(h.policy, secrets, cfg.Broker)
	if err != nil {
		return err
	}
	h.secrets, h.b = secrets, b
	h.checkSecrets(ctx)
	return nil
}

// Reload reads the secrets, then the policy, again. On an error what was
// in force stays.
func (h *Holder) Reload(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.secrets != nil {
		if err := h.secrets.Reload(ctx); err != nil {
			return err
		}
	}
	pol, err := LoadPolicy(h.path)
	if err != nil {
		return err
	}
	if h.b != nil {
		if err := h.b.SetPolicy(pol); err != nil {
			return err
		}
		h.checkSecrets(ctx)
	}
	h.policy = pol
	return nil
}

func (h *Holder) checkSecrets(ctx context.Context) {
	if err := h.b.CheckSecrets(ctx); err != nil {
		h.log.Error("secrets the broker policy names are missing; calls needing them will fail with rule secret", "err", err)
	}
}

// Policy is the policy in force.
func (h *Holder) Policy() *Policy {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.policy
}

// Check is the scheduler's grant check against the policy in force
// (Policy.Check).
func (h *Holder) Check(tenant string, names []string) error {
	return h.Policy().Check(tenant, names)
}

// ServeJob serves job j on ln with h's broker (after Serve) until ctx
// ends, and returns its calls as a result lists them (the first
// job.MaxBrokerCalls).
func (h *Holder) ServeJob(ctx context.Context, ln net.Listener, j JobInfo) (*job.BrokerCalls, error) {
	log := &CallLog{Max: job.MaxBrokerCalls}
	j.Calls = log
	err := h.Broker().Serve(ctx, ln, j)
	return log.Result(), err
}
