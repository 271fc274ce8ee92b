package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// sessions is the Gateway's session state: the sweeper, the MCP sessions
// it watches, and test knobs. The zero value is ready.
type sessions struct {
	sweeper startstop.Service

	mu       sync.Mutex
	watched  map[string]func()    // MCP session id → close it
	watchers sync.WaitGroup       // the watchers' goroutines
	alive    map[string]time.Time // MCP session id → its last keep-alive touch

	// Test knobs: skew (nanoseconds) is added to the clock of every
	// session time; every replaces sweepInterval(SessionIdleTTL) (set it
	// before Start).
	skew  atomic.Int64
	every time.Duration
}

// now is the clock of session times.
func (g *Gateway) now() time.Time { return time.Now().Add(time.Duration(g.sess.skew.Load())) }

// keepAlive refreshes the record of the MCP session sid of tenant when a
// request of it arrives (a ping or a tools/list keeps the SDK's session,
// so it must keep the workspace too), at most every tenth of the idle
// TTL. Only sessions this gateway watches (they made a call, so their
// record exists) are refreshed; the touch runs off the request's path.
func (g *Gateway) keepAlive(tenant, sid string) {
	now := g.now()
	g.sess.mu.Lock()
	_, watched := g.sess.watched[sid]
	last := g.sess.alive[sid]
	due := watched && now.Sub(last) >= g.cfg.SessionIdleTTL/10
	if due {
		if g.sess.alive == nil {
			g.sess.alive = map[string]time.Time{}
		}
		g.sess.alive[sid] = now
	}
	g.sess.mu.Unlock()
	if !due {
		return
	}
	g.sess.watchers.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := g.touch(ctx, SessionRef{Tenant: tenant, Kind: SessionMCP, Name: sid}); err != nil && !errors.Is(err, ErrSessionEnding) {
			g.log.Warn("mcp: keep the session's workspace alive", "session", sid, "err", err)
		}
	})
}

// touch creates or refreshes the session of ref. A named session it
// creates counts against its tenant's MaxNamedSessions: the record is
// created first, then the tenant's named sessions counted, and the new
// record removed again when they are over the cap (of two gateways racing
// for the last slot, both may refuse; neither lets the tenant past it).
func (g *Gateway) touch(ctx context.Context, ref SessionRef) (Session, error) {
	s, err := g.cfg.Sessions.Touch(ctx, ref, g.now())
	if err != nil || !s.Created || ref.Kind != SessionHTTP {
		return s, err
	}
	n, err := g.cfg.Sessions.Count(ctx, ref.Tenant, SessionHTTP)
	if err == nil && n <= g.cfg.MaxNamedSessions {
		return s, nil
	}
	if rerr := g.cfg.Sessions.Remove(ctx, s); rerr != nil {
		g.log.Warn("remove a session refused by the cap; the idle sweep ends it", "tenant", ref.Tenant, "session", ref.Name, "err", rerr)
	}
	if err != nil {
		return Session{}, err
	}
	return Session{}, &SessionCapError{Tenant: ref.Tenant, Cap: g.cfg.MaxNamedSessions, Idle: g.cfg.SessionIdleTTL}
}

// SessionCapError is a named session refused because its tenant holds
// Cap of them already (Config.MaxNamedSessions).
type SessionCapError struct {
	Tenant string
	Cap    int
	// Idle is when an unused session ends by itself (SessionIdleTTL).
	Idle time.Duration
}

func (e *SessionCapError) Error() string {
	return fmt.Sprintf("tenant %s holds %d named sessions, its cap (MaxNamedSessions, --gateway-max-named-sessions): "+
		"end one with DELETE /v1/sessions/NAME or reuse one; an unused one ends after %s", e.Tenant, e.Cap, e.Idle)
}

// sessionVolume is the workspace of tenant id's HTTP session name, created
// or refreshed: the volume an API job of the session mounts. A session
// being ended is an error wrapping ErrSessionEnding (retry when it is
// gone); an empty name, ErrSessionName.
func (g *Gateway) sessionVolume(ctx context.Context, id Identity, name string) (*job.Volume, error) {
	s, err := g.touch(ctx, SessionRef{Tenant: id.Tenant, Kind: SessionHTTP, Name: name})
	if err != nil {
		return nil, err
	}
	return &job.Volume{Name: s.Volume, Mode: job.VolumeRW, MaxBytes: g.cfg.SessionMaxBytes}, nil
}

// endSession ends tenant id's HTTP session name: its workspace is deleted,
// then its record. An unknown session is an error wrapping ErrNoSession;
// one another gateway is ending, ErrSessionEnding.
func (g *Gateway) endSession(ctx context.Context, id Identity, name string) error {
	return g.end(ctx, SessionRef{Tenant: id.Tenant, Kind: SessionHTTP, Name: name})
}

// end ends the session of ref, retrying when a use races the claim.
func (g *Gateway) end(ctx context.Context, ref SessionRef) error {
	var err error
	for range touchTries {
		var s Session
		if s, err = g.cfg.Sessions.Get(ctx, ref); err != nil {
			return err
		}
		if err = g.finish(ctx, s); !errors.Is(err, ErrSessionChanged) {
			return err
		}
	}
	return err
}

// claimTTL is how long a claim holds: the longest an end takes (the delete
// job's wait) and a margin. An older claim is taken over.
func (g *Gateway) claimTTL() time.Duration { return g.cfg.MaxWait + time.Minute }

// finish claims s, deletes its workspace and removes its record. A failure
// leaves the claim, which goes stale after claimTTL: the sweeper then
// tries again.
func (g *Gateway) finish(ctx context.Context, s Session) error {
	now := g.now()
	if !s.EndingAt.IsZero() && now.Sub(s.EndingAt) < g.claimTTL() {
		return fmt.Errorf("%w: %s (%s) is being ended since %s", ErrSessionEnding, s.Name, s.Kind, s.EndingAt.Format(time.RFC3339))
	}
	s, err := g.cfg.Sessions.Claim(ctx, s, now)
	if err != nil {
		return err
	}
	if err := g.deleteWorkspace(ctx, s); err != nil {
		return err
	}
	if err := g.cfg.Sessions.Remove(ctx, s); err != nil {
		return err
	}
	g.log.Info("session ended", "tenant", s.Tenant, "session", s.Name, "kind", s.Kind, "volume", s.Volume,
		"age", now.Sub(s.CreatedAt).Round(time.Second))
	return nil
}

// WorkspaceError is a session's workspace that could not be deleted: the
// delete job was not submitted, got no result, or did not end ok.
type WorkspaceError struct {
	Tenant, Session, Volume string
	// Job is the delete job's id; Reason and Message its outcome (empty
	// when it has none).
	Job     string
	Reason  job.Reason
	Message string
	Err     error
}

func (e *WorkspaceError) Error() string {
	what := fmt.Sprintf("gateway: delete the workspace %s of session %s (tenant %s) with job %s", e.Volume, e.Session, e.Tenant, e.Job)
	if e.Err != nil {
		return what + ": " + e.Err.Error() + "; it is retried by the session sweeper"
	}
	return fmt.Sprintf("%s: ended %s: %s; it is retried by the session sweeper", what, e.Reason, e.Message)
}

func (e *WorkspaceError) Unwrap() error { return e.Err }

// deleteWorkspace runs the job that deletes s's workspace, as s's tenant,
// and waits for it.
func (g *Gateway) deleteWorkspace(ctx context.Context, s Session) error {
	spec := job.Spec{ID: deleteJobID(s), Command: "true", Heal: &job.HealPolicy{Mode: job.HealOff},
		Volume: &job.Volume{Name: s.Volume, Mode: job.VolumeRW, Delete: true},
		Labels: map[string]string{LabelSession: s.Name, LabelSessionEnd: "true"}}
	werr := &WorkspaceError{Tenant: s.Tenant, Session: s.Name, Volume: s.Volume, Job: spec.ID}
	c, err := g.cfg.Clients.Client(ctx, s.Tenant)
	if err != nil {
		werr.Err = err
		return werr
	}
	if _, err := c.Submit(ctx, spec); err != nil {
		werr.Err = err
		return werr
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.MaxWait)
	defer cancel()
	r, err := c.Wait(wctx, spec.ID)
	if err != nil {
		werr.Err = err
		return werr
	}
	if r.Reason == job.ReasonRejected && hasField(r.Errors, "volume") {
		return nil // a fleet without volumes: there is no workspace to delete
	}
	if r.Reason != job.ReasonOK {
		werr.Reason, werr.Message = r.Reason, r.Error
		return werr
	}
	return nil
}

// deleteJobID names the delete job of one claim of s: a retry within the
// claim submits the same id, which the fleet runs once (so retries do not
// pile delete jobs into the tenant's queue), and a new claim, after a stale
// one, runs a new job.
func deleteJobID(s Session) string {
	h := sha256.Sum256([]byte(s.Tenant + "\x00" + s.Volume + "\x00" + s.CreatedAt.UTC().Format(time.RFC3339Nano) + "\x00" + s.EndingAt.UTC().Format(time.RFC3339Nano)))
	return "sess-end-" + hex.EncodeToString(h[:16])
}

// hasField reports whether errs name field or a field under it.
func hasField(errs []job.FieldError, field string) bool {
	for _, e := range errs {
		if e.Field == field || strings.HasPrefix(e.Field, field+".") {
			return true
		}
	}
	return false
}

// LabelSessionEnd marks the job that deletes a session's workspace.
const LabelSessionEnd = "paddock.session.end"

// sweepInterval is how often the sweeper looks for idle sessions: a tenth
// of the idle TTL, between 1 s and 1 min.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), time.Minute)
}

// sweepers bounds the sessions one sweep ends at once.
const sweepers = 4

// Start runs the session sweeper: every sweepInterval it ends the sessions
// idle for longer than SessionIdleTTL (a failure is logged and retried at
// a later sweep). Idempotent; Stop stops it.
func (g *Gateway) Start(ctx context.Context) error {
	every := g.sess.every
	if every <= 0 {
		every = sweepInterval(g.cfg.SessionIdleTTL)
	}
	return g.sess.sweeper.Start(ctx, startstop.NowAndEvery(every, g.sweep))
}

// Stop stops the sweeper and waits for its pass in progress. Idempotent.
func (g *Gateway) Stop() { g.sess.sweeper.Stop() }

// sweep is one pass of the sweeper.
func (g *Gateway) sweep(ctx context.Context) {
	now := g.now()
	idle, err := g.cfg.Sessions.Idle(ctx, now.Add(-g.cfg.SessionIdleTTL))
	if err != nil {
		if ctx.Err() == nil { // not stopped
			g.log.Warn("session sweep: list idle sessions", "err", err)
		}
		return
	}
	sem := make(chan struct{}, sweepers)
	var wg sync.WaitGroup
	for _, s := range idle {
		if !s.EndingAt.IsZero() && now.Sub(s.EndingAt) < g.claimTTL() {
			continue // being ended elsewhere
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := g.finish(ctx, s)
			switch {
			case err == nil:
			case errors.Is(err, ErrSessionChanged), errors.Is(err, ErrSessionEnding), errors.Is(err, ErrNoSession):
				g.log.Debug("session sweep: not ended", "tenant", s.Tenant, "session", s.Name, "why", err)
			case ctx.Err() != nil:
				g.log.Info("session sweep: stopped while ending a session; a later sweep ends it", "tenant", s.Tenant, "session", s.Name)
			default:
				g.log.Warn("session sweep: end an idle session", "tenant", s.Tenant, "session", s.Name, "err", err)
			}
		})
	}
	wg.Wait()
}
