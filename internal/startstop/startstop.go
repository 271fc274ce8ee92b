// Package startstop runs a background loop as a restartable service: the
// Start(ctx) error / Stop() pair every long-running component of Paddock
// offers (house style, habit 10), written once.
//
// A component embeds a Service and forwards to it:
//
//	func (p *Reaper) Start(ctx context.Context) error {
//		return p.svc.Start(ctx, startstop.NowAndEvery(p.interval, p.pass))
//	}
//
//	func (p *Reaper) Stop() { p.svc.Stop() }
//
// It imports only the standard library, so that every package may use it,
// including those the import rule keeps free of other project packages
// (sandbox, locks, …): an internal helper with one job is not a dependency
// on another part of Paddock.
package startstop

import (
	"context"
	"sync"
	"time"
)

// Service runs one loop at a time in its own goroutine. The zero value is a
// stopped service. Start and Stop are idempotent and safe from any
// goroutine; Stop may come before Start, and Start may follow Stop.
//
// The loop is handed a context detached from the caller's cancellation (its
// values are kept) and cancelled by Stop. A loop stops itself by returning:
// the service is then stopped, Stop is a no-op and Start runs it again.
// Calling Stop from inside the loop would wait for the loop itself and
// never return: return instead.
type Service struct {
	// mu is held for the whole of Start and Stop: a Start waits for a Stop
	// in progress, so two runs of the loop never overlap.
	mu     sync.Mutex
	cancel context.CancelFunc // of the last run; nil before the first
	done   chan struct{}      // closed when the last run's loop returned
}

// Start runs loop in a new goroutine unless it is running already (then it
// returns nil at once).
func (s *Service) Start(ctx context.Context, loop func(ctx context.Context)) error {
	return s.StartWith(ctx, nil, loop)
}

// StartWith is Start with a first step: unless the loop is running
// already, first (when not nil) runs synchronously with the caller's ctx,
// and when it fails the loop is not started and its error is returned.
// Concurrent Starts wait for each other, so first runs once per start.
func (s *Service) StartWith(ctx context.Context, first func(ctx context.Context) error, loop func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		return nil
	}
	if s.cancel != nil {
		s.cancel() // a loop that returned on its own: release its context
	}
	if first != nil {
		if err := first(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		loop(ctx)
	}()
	return nil
}

// Stop cancels the loop's context and waits until the loop has returned.
// It reports whether it stopped a running loop (false before any Start,
// after a Stop, and after the loop returned on its own). Idempotent.
func (s *Service) Stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil {
		return false
	}
	running := s.runningLocked()
	s.cancel()
	<-s.done
	s.cancel, s.done = nil, nil
	return running
}

// Running reports whether the loop is running.
func (s *Service) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Service) runningLocked() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// NowAndEvery returns a loop that calls pass at once and then at every
// tick of an interval ticker (started before the first pass, so a slow
// pass does not shift the rhythm), until its context is cancelled.
// interval must be positive.
func NowAndEvery(interval time.Duration, pass func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}
}

// Every returns a loop that calls pass at every tick of an interval ticker
// (the first one interval after the loop starts), until its context is
// cancelled. interval must be positive.
func Every(interval time.Duration, pass func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pass(ctx)
			}
		}
	}
}
