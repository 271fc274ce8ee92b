package worker

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/sandbox"
)

// Broker serves a job's grants of the secrets broker on its box's broker
// socket (package broker, through an adapter in cmd): Serve answers the
// box's calls on ln until ctx ends or the deadline passes, closes ln, and
// returns the calls made.
type Broker interface {
	Serve(ctx context.Context, ln net.Listener, j BrokerJob) (*job.BrokerCalls, error)
}

// BrokerJob is the job a Broker serves.
type BrokerJob struct {
	Tenant   string
	ID       string
	Grants   []string
	Deadline time.Time
}

// noBroker says why a job that names grants cannot run on this worker, or
// "" when it can.
func (w *Worker) noBroker(r *jobRun) string {
	if len(r.spec.Grants) == 0 || w.cfg.Broker != nil {
		return ""
	}
	return "the job names grants but this worker runs no secrets broker (start it with --broker-policy, as the scheduler is): nothing ran"
}

// serveBroker serves the job's grants on the box's broker socket for as
// long as the job runs, and returns the function that ends that (and puts
// the calls on the result); call it before the result is recorded. A job
// without grants gets its socket closed at once: the box's connections are
// refused.
func (w *Worker) serveBroker(ctx context.Context, r *jobRun, sess *sandbox.Session) (stop func()) {
	ln := sess.Broker()
	if ln == nil {
		return func() {}
	}
	if w.cfg.Broker == nil || len(r.spec.Grants) == 0 {
		_ = ln.Close()
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var calls *job.BrokerCalls
	go func() {
		defer close(done)
		var err error
		calls, err = w.cfg.Broker.Serve(ctx, ln, BrokerJob{Tenant: r.spec.Tenant, ID: r.spec.ID, Grants: r.spec.Grants, Deadline: r.deadline()})
		if err != nil {
			r.log.WarnContext(ctx, "secrets broker stopped serving the job", "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			if calls != nil && len(calls.Calls)+calls.Dropped > 0 {
				r.res.Broker = calls
			}
		})
	}
}
