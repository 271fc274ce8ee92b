package fleettest

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// rollingRestart restarts every process in turn, as an upgrade would,
// each gracefully (SIGTERM) and waited for before the next: the NATS
// nodes, the Sentinels, the Redis replica then the primary, the
// schedulers, the workers (which drain).
func (f *fleet) rollingRestart(ctx context.Context) (string, error) {
	for _, n := range natsHosts {
		if err := f.procs[n].restart(20 * time.Second); err != nil {
			return "", err
		}
		if err := f.waitNATS(ctx, n); err != nil {
			return "", err
		}
	}
	for _, s := range []string{"sentinel1", "sentinel2", "sentinel3"} {
		if err := f.procs[s].restart(10 * time.Second); err != nil {
			return "", err
		}
	}
	if err := f.rollRedis(ctx); err != nil {
		return "", err
	}
	for _, s := range schedulerHosts {
		if err := f.procs[s].restart(20 * time.Second); err != nil {
			return "", err
		}
		if err := f.waitScheduler(ctx, s); err != nil {
			return "", err
		}
	}
	for _, w := range workerHosts {
		if err := f.procs[w].restart(40 * time.Second); err != nil {
			return "", err
		}
		if err := f.waitWorker(ctx, w); err != nil {
			return "", err
		}
	}
	return "restarted 3 NATS nodes, 3 Sentinels, 2 Redis, 2 schedulers, 3 workers in turn", nil
}

// rollRedis restarts the replica, then the primary (with Sentinel: a
// failover on the way).
func (f *fleet) rollRedis(ctx context.Context) error {
	prim, err := f.primary(ctx)
	if err != nil {
		return err
	}
	order := []string{"r1", "r2"}
	if prim == "r1" {
		order = []string{"r2", "r1"}
	}
	for _, h := range order {
		p := f.procs["redis"+strings.TrimPrefix(h, "r")]
		if !p.stop(syscall.SIGTERM, 15*time.Second) {
			p.kill()
		}
		if f.mode.sentinel && h == prim {
			// The Sentinels promote the replica once the primary is down.
			if err := poll(ctx, "a Sentinel promotion", func() bool {
				np, err := f.primary(ctx)
				return err == nil && np != h
			}); err != nil {
				return err
			}
		}
		if err := f.setRedisRole(ctx, p, h); err != nil {
			return err
		}
		if err := p.start(); err != nil {
			return err
		}
		if err := poll(ctx, "Redis on "+h, func() bool { return f.rdb.Ping(ctx).Err() == nil }); err != nil {
			return err
		}
	}
	return nil
}

// together kills at once the NATS node leading the first tenant's jobs
// stream, a whole worker host and the Redis primary.
func (f *fleet) together(ctx context.Context) (string, error) {
	a, err := f.killNATS(true)(ctx)
	if err != nil {
		return "", err
	}
	b, _ := f.killWorkerHost("w3")(ctx)
	f.down.worker = "w3"
	c, err := f.killRedisPrimary(ctx)
	return fmt.Sprintf("%s; %s; %s", a, b, c), err
}

func (f *fleet) healTogether(ctx context.Context) error {
	if err := f.restartRedis(ctx); err != nil {
		return err
	}
	if err := f.restartNATS(ctx); err != nil {
		return err
	}
	return f.restartWorker(f.down.worker)(ctx)
}
