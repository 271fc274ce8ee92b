package fleettest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pclient "github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/tenant"
)

// tenants of the workload; their jobs go round-robin.
var tenants = []string{"fa", "fb", "fc"}

// backlog is how many accepted jobs may be without a result before the
// submitter waits: enough to keep every worker slot busy, small enough
// that a job's delay is the fault's, not the queue's.
var backlog = 2 * len(workerHosts) * workerConcurrency

// spec is the i-th job: one in twenty sleeps 12 s (longer than a fenced
// worker takes to stop it), one in twenty 3 s, one in ten 1 s, the rest
// echo (the engine's container churn is their cost). Every command names
// its job id, so a box's process list says which job it runs.
func spec(i int) (string, job.Spec) {
	t := tenants[i%len(tenants)]
	id := fmt.Sprintf("fj-%05d", i)
	cmd := "echo quick " + id
	switch {
	case i%20 == 3:
		cmd = "sleep 12; echo long " + id
	case i%20 == 13:
		cmd = "sleep 3; echo long " + id
	case i%10 == 7:
		cmd = "sleep 1; echo mid " + id
	}
	return t, job.Spec{ID: id, Command: cmd}
}

// tenantOf is the tenant of job id fj-N.
func tenantOf(id string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "fj-"))
	return tenants[n%len(tenants)]
}

// workload submits the jobs and follows their results.
type workload struct {
	f       *fleet
	total   int
	clients map[string]*pclient.Client

	submitted atomic.Int64 // accepted (acked by JetStream)
	done      atomic.Int64 // with a result in Redis

	mu       sync.Mutex
	accepted []string        // job keys, in order of acceptance
	pending  map[string]bool // accepted keys without a result yet
}

// addTenants registers the workload's tenants (no quotas) and creates
// their streams as `paddock tenant add` does, then waits for them.
func (f *fleet) addTenants(ctx context.Context, total int) (*workload, error) {
	reg, err := tenant.NewRegistry(ctx, f.js)
	if err != nil {
		return nil, err
	}
	w := &workload{f: f, total: total, clients: map[string]*pclient.Client{}, pending: map[string]bool{}}
	for _, n := range tenants {
		// Streams first, then the record: a scheduler that sees the record
		// finds the streams made and leaves them alone. (Both creating the
		// same R3 stream at once left the harness's request unanswered for
		// minutes on a loaded machine.) Each try has its own deadline.
		var err error
		for try := 0; try < 12; try++ {
			tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err = results.EnsureTenant(tctx, f.js, results.StreamConfig{Replicas: f.mode.replicas}, n, 0, 0)
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tenant %s's streams: %w", n, err)
		}
		if err := reg.Put(ctx, tenant.Tenant{Name: n}); err != nil {
			return nil, err
		}
		// Without auth the default inbox works; the client's warning about
		// it is meant for tenant credentials.
		c, err := pclient.New(f.nc, pclient.Config{Tenant: n, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		w.clients[n] = c
	}
	return w, nil
}

// submit submits every job, one submitter per tenant (a tenant whose
// stream is unavailable holds up only its own), pacing by the backlog; a
// submission that fails (a NATS node down) is retried with the same id
// until acked: the stream's duplicate window makes that safe.
func (w *workload) submit(ctx context.Context) error {
	errs := make(chan error, len(tenants))
	for k := range tenants {
		go func() { errs <- w.submitTenant(ctx, k) }()
	}
	var first error
	for range tenants {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// submitTenant submits the jobs i with i % len(tenants) == k.
func (w *workload) submitTenant(ctx context.Context, k int) error {
	for i := k; i < w.total; i += len(tenants) {
		for w.submitted.Load()-w.done.Load() >= int64(backlog) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond): // the pace: wait for results to free the backlog
			}
		}
		t, s := spec(i)
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := w.clients[t].Submit(sctx, s)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("submission %s never acked: %v", s.ID, err)
			}
			time.Sleep(200 * time.Millisecond) // back-off of a retried submission while a service is down
		}
		key := job.Key(t, s.ID)
		w.mu.Lock()
		w.accepted = append(w.accepted, key)
		w.pending[key] = true
		w.mu.Unlock()
		w.submitted.Add(1)
	}
	return nil
}

// follow counts results in Redis (the pending keys, pipelined, every
// 250 ms) until every job is done or ctx ends.
func (w *workload) follow(ctx context.Context) {
	for ctx.Err() == nil && w.done.Load() < int64(w.total) {
		w.mu.Lock()
		keys := make([]string, 0, len(w.pending))
		for k := range w.pending {
			keys = append(keys, k)
		}
		w.mu.Unlock()
		if len(keys) > 0 {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := w.f.store.Finished(qctx, keys)
			cancel()
			if err == nil {
				w.mu.Lock()
				for k, ok := range got {
					if ok && w.pending[k] {
						delete(w.pending, k)
						w.done.Add(1)
					}
				}
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond): // the poll interval of the progress count
		}
	}
}

// keys returns the accepted job keys.
func (w *workload) keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.accepted...)
}

func (w *workload) close() {
	for _, c := range w.clients {
		c.Close()
	}
}
