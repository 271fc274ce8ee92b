package cli

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/worker"
)

// healFlags configure the worker's self-healing loop. The LLM key is read
// from PADDOCK_LLM_API_KEY only, never from a flag (flags show in ps).
type healFlags struct {
	defaultMode     string
	llmURL          string
	llmModel        string
	llmTokensPerJob int
	llmTimeout      time.Duration
	memoTTL         time.Duration
	packageDir      string
}

func (h *healFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&h.defaultMode, "heal-default-mode", "rules", "heal mode of jobs that name none: off, rules, llm")
	fs.StringVar(&h.llmURL, "llm-url", "", "OpenAI-compatible endpoint for LLM repairs (e.g. http://127.0.0.1:8000/v1); key from PADDOCK_LLM_API_KEY")
	fs.StringVar(&h.llmModel, "llm-model", "", "model name sent to --llm-url")
	fs.IntVar(&h.llmTokensPerJob, "llm-max-tokens-per-job", 4096, "LLM token budget of one job")
	fs.DurationVar(&h.llmTimeout, "llm-timeout", 30*time.Second, "timeout of one LLM call")
	fs.DurationVar(&h.memoTTL, "heal-memo-ttl", 7*24*time.Hour, "how long a repair that worked is remembered (0 disables the memo)")
	fs.StringVar(&h.packageDir, "package-dir", "", "host directory of .deb files mounted read-only at "+healer.DefaultSource+" for installs on exit 127")
}

// config is the healer.Config the flags give, without the services.
func (h *healFlags) config() (healer.Config, error) {
	cfg := healer.Config{DefaultMode: job.HealMode(h.defaultMode)}
	if h.llmURL != "" {
		if h.llmModel == "" {
			return cfg, fmt.Errorf("--llm-url needs --llm-model")
		}
		cfg.LLM = &healer.LLMConfig{URL: h.llmURL, Model: h.llmModel, APIKey: os.Getenv("PADDOCK_LLM_API_KEY"),
			MaxTokensPerJob: h.llmTokensPerJob, Timeout: h.llmTimeout}
	}
	return cfg, nil
}

// check validates the heal flags without I/O (healer.New makes none),
// so that a worker with bad ones stops before it connects to anything.
func (h *healFlags) check() error {
	cfg, err := h.config()
	if err != nil {
		return err
	}
	if _, err := healer.New(healer.Config{DefaultMode: cfg.DefaultMode}); err != nil {
		return fmt.Errorf("--heal-default-mode: %w", err)
	}
	if _, err := healer.New(cfg); err != nil {
		return fmt.Errorf("--llm-url: %w", err)
	}
	return nil
}

// newHealer builds the heal loop for a worker.
func newHealer(rdb redis.UniversalClient, h *healFlags, obs *observability, log *slog.Logger) (*healer.Loop, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	cfg.Logger = log
	cfg.Tracer = obs.provider.TracerProvider().Tracer("github.com/paddockhq/paddock/healer")
	cfg.SpanAttributes = worker.SandboxSpanAttributes
	cfg.Metrics = healer.Metrics{Heal: obs.metrics.HealAttempt, Event: obs.metrics.HealEvent}
	if h.memoTTL > 0 {
		memo, err := healer.NewRedisMemo(rdb, healer.RedisMemoConfig{TTL: h.memoTTL})
		if err != nil {
			return nil, err
		}
		cfg.Memo = memo
	}
	return healer.New(cfg)
}

// packageMounts mounts the operator's package directory where the default
// installer looks for packages.
func (h *healFlags) packageMounts() []sandbox.Mount {
	if h.packageDir == "" {
		return nil
	}
	return []sandbox.Mount{{Source: h.packageDir, Target: healer.DefaultSource, ReadOnly: true}}
}
