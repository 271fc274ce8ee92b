package fleettest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/job"
)

// fault is one injected failure: inject, hold, heal (heal may be nil).
type fault struct {
	name   string
	hold   time.Duration
	inject func(ctx context.Context) (note string, err error)
	heal   func(ctx context.Context) error
}

// faultRecord is what happened to one fault, in fleet.json.
type faultRecord struct {
	Name       string    `json:"name"`
	Note       string    `json:"note,omitempty"`
	InjectedAt time.Time `json:"injected_at"`
	HealedAt   time.Time `json:"healed_at"`
	// RecoveredAt: the first completion after the heal (or the inject,
	// for a fault without a heal).
	RecoveredAt time.Time `json:"recovered_at"`
	// From the stored results, after the run (measure): the longest gap
	// between completions in the fault's window (the inject to 30 s after
	// results flowed again), the end of that gap after the inject
	// (recovery), and how long after the inject the jobs in flight at the
	// inject ended.
	GapS       float64 `json:"gap_s"`
	RecoveryS  float64 `json:"recovery_s"`
	MaxDelayS  float64 `json:"max_delay_s"`
	InFlight   int     `json:"in_flight"`
	RerunsSeen int     `json:"reruns,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// faults is the full list, in order; short picks the ones `make test`
// can afford.
func (f *fleet) faults(short bool) []fault {
	all := []fault{
		{name: "nats-kill", hold: 10 * time.Second, inject: f.killNATS(false), heal: f.restartNATS},
		{name: "nats-kill-leader", hold: 10 * time.Second, inject: f.killNATS(true), heal: f.restartNATS},
		{name: "nats-partition", hold: 15 * time.Second, inject: f.partitionNATS, heal: f.healNATS},
		{name: "redis-primary-kill", hold: 15 * time.Second, inject: f.killRedisPrimary, heal: f.restartRedis},
		{name: "worker-partition", hold: 20 * time.Second, inject: f.partitionWorker("w1"), heal: f.healWorker("w1")},
		{name: "worker-host-kill", hold: 10 * time.Second, inject: f.killWorkerHost("w2"), heal: f.restartWorker("w2")},
		{name: "scheduler-kill", hold: 5 * time.Second, inject: f.killScheduler("s1"), heal: f.restartScheduler("s1")},
		{name: "rolling-restart", inject: f.rollingRestart},
		{name: "together", hold: 10 * time.Second, inject: f.together, heal: f.healTogether},
	}
	if !short {
		return all
	}
	keep := []string{"nats-kill-leader", "worker-partition", "worker-host-kill", "scheduler-kill"}
	return slices.DeleteFunc(all, func(x fault) bool { return !slices.Contains(keep, x.name) })
}

// leaderOf returns the NATS node leading tenant's jobs stream (with R1:
// the one node that holds it).
func (f *fleet) leaderOf(ctx context.Context, tenant string) (string, error) {
	s, err := f.js.Stream(ctx, job.JobsStream(tenant))
	if err != nil {
		return "", err
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("the jobs stream has no leader")
	}
	return info.Cluster.Leader, nil
}

// down holds what an inject stopped, for its heal.
type down struct{ nats, redis, worker string }

func (f *fleet) killNATS(leader bool) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		l, err := f.leaderOf(ctx, tenants[0])
		if err != nil {
			return "", err
		}
		victim := l
		if !leader {
			for _, n := range natsHosts {
				if n != l {
					victim = n
					break
				}
			}
		}
		f.down.nats = victim
		f.procs[victim].kill()
		return fmt.Sprintf("killed %s (leader of %s: %s)", victim, job.JobsStream(tenants[0]), l), nil
	}
}

func (f *fleet) restartNATS(ctx context.Context) error {
	n := f.down.nats
	if err := f.procs[n].start(); err != nil {
		return err
	}
	return f.waitNATS(ctx, n)
}

func (f *fleet) partitionNATS(ctx context.Context) (string, error) {
	l, err := f.leaderOf(ctx, tenants[0])
	if err != nil {
		return "", err
	}
	f.down.nats = l
	return "partitioned " + l + " (leader of " + job.JobsStream(tenants[0]) + ")", f.net.partition(l)
}

func (f *fleet) healNATS(ctx context.Context) error {
	if err := f.net.heal(f.down.nats); err != nil {
		return err
	}
	return f.waitNATS(ctx, f.down.nats)
}

// killRedisPrimary kills the primary (the Sentinels' answer) and, when
// the fleet follows Sentinel, waits until they promote the replica.
func (f *fleet) killRedisPrimary(ctx context.Context) (string, error) {
	p, err := f.primary(ctx)
	if err != nil {
		return "", err
	}
	f.down.redis = p
	f.procs["redis"+strings.TrimPrefix(p, "r")].kill()
	if !f.mode.sentinel {
		return "killed the primary on " + p + " (no failover: the paddock binary takes no Sentinel URL; it is restarted as primary)", nil
	}
	start := time.Now()
	err = poll(ctx, "a Sentinel promotion", func() bool {
		np, err := f.primary(ctx)
		return err == nil && np != p
	})
	return fmt.Sprintf("killed the primary on %s; promoted after %.1f s", p, time.Since(start).Seconds()), err
}

// restartRedis starts the killed Redis again: as a replica of the new
// primary after a failover (Sentinel would make it one anyway), else as
// the primary it was.
func (f *fleet) restartRedis(ctx context.Context) error {
	p := f.procs["redis"+strings.TrimPrefix(f.down.redis, "r")]
	if err := f.setRedisRole(ctx, p, f.down.redis); err != nil {
		return err
	}
	return p.start()
}

// setRedisRole rewrites p's flags: a replica of the current primary,
// unless host is the primary.
func (f *fleet) setRedisRole(ctx context.Context, p *proc, host string) error {
	prim, err := f.primary(ctx)
	if err != nil {
		return err
	}
	p.argv = append([]string{}, f.redisArgs(host)...)
	if prim != host {
		p.argv = append(p.argv, "--replicaof", f.ip[prim], strconv.Itoa(redisPort))
	}
	return nil
}

// longJob matches the 12 s jobs' commands.
var longJob = regexp.MustCompile(`sleep 12`)

// partitionWorker cuts w from Redis and NATS while it runs a 12 s job and
// checks its self-fence: the boxes of those jobs stop well before their
// commands would end (2/3 of the 8 s heartbeat TTL, then the destroy).
// Afterwards check finds none of them recorded by w's fenced run.
func (f *fleet) partitionWorker(w string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var jobs []string
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_ = poll(lctx, w+" running a 12 s job", func() bool {
			jobs, _ = boxJobs(lctx, f.docker, f.workerID(w), longJob)
			return len(jobs) > 0
		})
		if err := f.net.partition(w); err != nil {
			return "", err
		}
		start := time.Now()
		f.fenced = append(f.fenced, fencedRun{worker: f.workerID(w), at: start, jobs: jobs})
		fctx, cancel2 := context.WithTimeout(ctx, 30*time.Second)
		defer cancel2()
		err := poll(fctx, w+"'s boxes stopped by its self-fence", func() bool {
			n, err := busyBoxes(fctx, f.docker, f.workerID(w))
			return err == nil && n == 0
		})
		took := time.Since(start)
		note := fmt.Sprintf("partitioned %s while it ran %v; no box of it runs a job %.1f s later", w, jobs, took.Seconds())
		if err != nil {
			return note, fmt.Errorf("%s partitioned: its boxes still run jobs after 30 s (self-fence): %w", w, err)
		}
		if len(jobs) > 0 && took > 11*time.Second {
			return note, fmt.Errorf("%s's 12 s jobs ran on for %.1f s after the partition: no self-fence", w, took.Seconds())
		}
		return note, nil
	}
}

// fencedRun is the jobs a partitioned worker was running when cut off.
type fencedRun struct {
	worker string
	at     time.Time
	jobs   []string
}

func (f *fleet) healWorker(w string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := f.net.heal(w); err != nil {
			return err
		}
		return f.waitWorker(ctx, w)
	}
}

func (f *fleet) killWorkerHost(w string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		busy := f.waitBusy(ctx, w)
		f.procs[w].markDown() // the host's supervisor dies with it
		n := f.net.killHost(w)
		f.procs[w].kill() // reaps it
		return fmt.Sprintf("killed every process on %s (%d; %d boxes running jobs)", w, n, busy), nil
	}
}

func (f *fleet) restartWorker(w string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := f.procs[w].start(); err != nil {
			return err
		}
		return f.waitWorker(ctx, w)
	}
}

func (f *fleet) killScheduler(s string) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		f.procs[s].kill()
		return "killed " + s, nil
	}
}

func (f *fleet) restartScheduler(s string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := f.procs[s].start(); err != nil {
			return err
		}
		return f.waitScheduler(ctx, s)
	}
}

// waitBusy waits up to 20 s until worker host w runs a job in a box (so
// its fault catches work in flight) and returns how many boxes do.
func (f *fleet) waitBusy(ctx context.Context, w string) int {
	n := 0
	bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = poll(bctx, w+" running a job", func() bool {
		n, _ = busyBoxes(bctx, f.docker, f.workerID(w))
		return n > 0
	})
	return n
}
