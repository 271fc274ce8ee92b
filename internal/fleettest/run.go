package fleettest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// phase is what the progress line says the harness is doing.
type phase struct {
	mu   sync.Mutex
	text string
}

func (p *phase) set(s string) { p.mu.Lock(); p.text = s; p.mu.Unlock() }
func (p *phase) get() string  { p.mu.Lock(); defer p.mu.Unlock(); return p.text }

// run submits total jobs, injects the faults one at a time while they
// run, waits for every result and checks the fleet.
func (f *fleet) run(t *testing.T, total int, short bool) *report {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(total)*600*time.Millisecond+15*time.Minute)
	defer cancel()
	w, err := f.addTenants(ctx, total)
	require.NoError(t, err)
	defer w.close()
	start := time.Now()
	ph := &phase{text: "warming up"}
	pctx, stopProgress := context.WithCancel(ctx)
	defer stopProgress()
	go w.follow(ctx)
	go f.progress(pctx, w, ph, start)
	subErr := make(chan error, 1)
	go func() { subErr <- w.submit(ctx) }()

	faults := f.faults(short)
	require.NoError(t, w.waitDone(ctx, int64(min(total/20, 30))), "the first results")
	warm := time.Now()
	var recs []faultRecord
	for i, fl := range faults {
		at := (i + 1) * total / (len(faults) + 1)
		ph.set(fmt.Sprintf("running; %s at %d results", fl.name, at))
		require.NoError(t, w.waitDone(ctx, int64(at)), "results before fault %s", fl.name)
		recs = append(recs, f.inject(ctx, fl, w, ph))
	}
	ph.set("waiting for the last results")
	require.NoError(t, <-subErr, "submissions")
	require.NoError(t, w.waitDone(ctx, int64(total)), "every result (%d of %d)", w.done.Load(), total)
	elapsed := time.Since(start)
	rep := &report{Run: f.net.run, Short: short, Replicas: f.mode.replicas, Sentinel: f.mode.sentinel,
		Auth: "off (see docs/reliability.md, Fleet harness)", Jobs: total, Faults: recs,
		DurationS: round(elapsed.Seconds()), JobsPerS: round(float64(total) / elapsed.Seconds())}
	ph.set("waiting for empty queues")
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Minute)
	rep.QueueLeft = f.waitQueueEmpty(qctx)
	qcancel()
	keys := w.keys()
	rep.Accepted = len(keys)
	ph.set("checking results in Redis and the streams")
	rs, err := f.check(ctx, keys, rep)
	require.NoError(t, err)
	rep.Baseline = measure(rs, rep.Faults, warm)
	ph.set("stopping the workers, counting boxes left")
	stopProgress()
	rep.LeftoverBoxes = f.leftovers(ctx)
	rep.SupervisorRestarts, rep.SupervisorExits = map[string]int{}, map[string][]string{}
	for name, p := range f.procs {
		if n := p.supervisorRestarts(); n > 0 {
			rep.SupervisorRestarts[name], rep.SupervisorExits[name] = n, p.exitLines()
		}
	}
	return rep
}

// waitDone waits until n jobs have a result.
func (w *workload) waitDone(ctx context.Context, n int64) error {
	return poll(ctx, "results", func() bool { return w.done.Load() >= n })
}

// inject runs one fault: inject, hold, heal, then waits until results
// come again (three more than at the heal).
func (f *fleet) inject(ctx context.Context, fl fault, w *workload, ph *phase) faultRecord {
	rec := faultRecord{Name: fl.name, InjectedAt: time.Now()}
	ph.set(fl.name + ": injecting")
	note, err := fl.inject(ctx)
	rec.Note = note
	if err != nil {
		rec.Error = err.Error()
	}
	f.t.Logf("fault %s: %s", fl.name, note)
	ph.set(fl.name + ": holding " + fl.hold.String())
	select {
	case <-ctx.Done():
	case <-time.After(fl.hold): // the fault's duration: the fleet runs without the part meanwhile
	}
	if fl.heal != nil {
		ph.set(fl.name + ": healing")
		if err := fl.heal(ctx); err != nil && rec.Error == "" {
			rec.Error = "heal: " + err.Error()
		}
	}
	rec.HealedAt = time.Now()
	ph.set(fl.name + ": waiting for results to flow again")
	at := w.done.Load()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := poll(rctx, "results after "+fl.name, func() bool {
		return w.done.Load() >= min(at+3, int64(w.total))
	}); err != nil && rec.Error == "" {
		rec.Error = "no results within 3 min of the heal"
	}
	rec.RecoveredAt = time.Now()
	f.t.Logf("fault %s: healed after %.1f s, results flowing %.1f s after the heal", fl.name,
		rec.HealedAt.Sub(rec.InjectedAt).Seconds(), rec.RecoveredAt.Sub(rec.HealedAt).Seconds())
	return rec
}

// progress logs a line every 5 s.
func (f *fleet) progress(ctx context.Context, w *workload, ph *phase, start time.Time) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.t.Logf("fleet %s: %4.0f s  submitted %d/%d  done %d  — %s", f.net.run, time.Since(start).Seconds(),
			w.submitted.Load(), w.total, w.done.Load(), ph.get())
	}
}

// leftovers stops every worker (they drain and remove their boxes) and
// counts the fleet's boxes still on the engine 30 s later at most.
func (f *fleet) leftovers(ctx context.Context) int {
	f.stopAll()
	n := -1
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = poll(lctx, "no box of the fleet", func() bool {
		b, err := boxes(lctx, f.docker, prefix+f.net.run+"-")
		if err == nil {
			n = len(b)
		}
		return n == 0
	})
	return n
}
