package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
)

// ErrHeartbeatTTL is wrapped by the error of a worker whose HeartbeatTTL
// is shorter than its sandbox watchdog + WatchdogMargin. It wraps ErrConfig.
var ErrHeartbeatTTL = fmt.Errorf("%w: heartbeat TTL below the sandbox watchdog + %s", ErrConfig, WatchdogMargin)

// WatchdogMargin is how much longer than the sandbox watchdog the
// worker's heartbeat TTL must be: a frozen worker's boxes end (their
// watchdog) before its key can expire and a rescuer runs its jobs
// elsewhere (docs/reliability.md).
const WatchdogMargin = 2 * time.Second

// RescueGrace is how long a worker's rescuer waits, once it finds another
// worker dead, before running that worker's jobs elsewhere: a quarter of
// the heartbeat TTL (2 s at the default 8 s). A worker cut off from Redis
// kills its jobs at 2/3 of the TTL (Heartbeat's fence); the grace gives
// their boxes that third plus a quarter to end before any re-run, where a
// loaded host was measured taking more than the third alone
// (faulttest's TestPartitionedWorkerFencesItself).
func RescueGrace(ttl time.Duration) time.Duration { return ttl / 4 }

// DefaultID is the worker id a Config without one gets: hostname-pid.
func DefaultID() string {
	h, _ := os.Hostname()
	return h + "-" + strconv.Itoa(os.Getpid())
}

// CheckHeartbeatTTL is the one check that a heartbeat TTL outlasts the
// boxes' watchdog by WatchdogMargin (ErrHeartbeatTTL). New runs it with
// its runtime's watchdog; a caller may run it first, on its flags.
func CheckHeartbeatTTL(ttl, watchdog time.Duration) error {
	if ttl < watchdog+WatchdogMargin {
		return fmt.Errorf("%w: heartbeat TTL %s, watchdog %s: a frozen worker's sandboxes must end before its jobs run elsewhere",
			ErrHeartbeatTTL, ttl, watchdog)
	}
	return nil
}

// Build makes a Worker and what it runs on from the fleet's connections;
// cmd/paddock and the tests build every worker with it.
//
//   - docker: the sandbox runtime, made from cfg.Sandbox with the worker's
//     ID as its Owner, cfg.Logger as its default logger and a broker socket
//     per box when cfg.Broker is set. Unused (may be nil) with NoopExecutor.
//   - js: the jobs' agent I/O (results.NewIO with cfg.IOConfig) unless
//     cfg.IO is set, and, with cfg.Wakeups, the wake-up subscription on
//     js.Conn() (subscribeWakeups). Nil: no agent I/O, and wake-ups only
//     from the caller's Wake.
//   - rdb and store as for New.
func Build(ctx context.Context, rdb redis.UniversalClient, docker sandbox.DockerClient, js jetstream.JetStream, store Store, cfg Config) (*Worker, error) {
	cfg.ID = cmp.Or(cfg.ID, DefaultID())
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	var rt *sandbox.Runtime
	if !cfg.NoopExecutor {
		sc := cfg.Sandbox
		sc.Owner = cfg.ID
		sc.Logger = cmp.Or(sc.Logger, cfg.Logger)
		sc.BrokerSocket = sc.BrokerSocket || cfg.Broker != nil
		var err error
		if rt, err = sandbox.New(docker, sc); err != nil {
			return nil, err
		}
	}
	if cfg.IO == nil && js != nil {
		ic := cfg.IOConfig
		ic.Logger = cmp.Or(ic.Logger, cfg.Logger)
		x, err := results.NewIO(js, ic)
		if err != nil {
			return nil, err
		}
		cfg.IO = ResultsIO(x)
	}
	var woken atomic.Pointer[Worker]
	var sub *nats.Subscription
	if cfg.Wakeups && js != nil {
		var err error
		if sub, err = subscribeWakeups(ctx, js.Conn(), &woken); err != nil {
			// The worker then polls as it did before wake-ups existed.
			cfg.Wakeups = false
			cfg.Logger.Warn("no wake-ups: this worker polls Redis every task check interval instead (more Redis load, more latency); "+
				"its NATS user may not subscribe to "+job.SubjectWakePrefix+">: re-issue creds/worker.creds (delete it, run paddock auth init)", "err", err)
		}
	}
	w, err := New(rdb, rt, store, cfg)
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		return nil, err
	}
	if js != nil {
		nc := js.Conn()
		w.wakePub = func(queue string) { _ = nc.Publish(job.WakeSubject(queue), nil) } // fire and forget, as the scheduler's
	}
	woken.Store(w)
	return w, nil
}

// subscribeWakeups feeds the scheduler's wake-ups (job.WakeSubject) to the
// worker w holds once it is set. The subscription lives as long as the
// connection. Credentials issued before wake-ups existed do not allow it:
// the server's permission error, seen after a flush, is returned.
func subscribeWakeups(ctx context.Context, nc *nats.Conn, w *atomic.Pointer[Worker]) (*nats.Subscription, error) {
	subject := job.SubjectWakePrefix + ">"
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if wk := w.Load(); wk != nil {
			wk.Wake(strings.TrimPrefix(m.Subject, job.SubjectWakePrefix))
		}
	})
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = nc.FlushWithContext(fctx)
	cancel()
	if last := nc.LastError(); last != nil && strings.Contains(last.Error(), subject) {
		err = last
	}
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("worker: subscribe to wake-ups: %w", err)
	}
	return sub, nil
}
