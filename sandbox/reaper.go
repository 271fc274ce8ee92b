package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/internal/startstop"
)

// Liveness tells whether a worker (a container owner) is still alive,
// typically from a heartbeat key with a TTL.
type Liveness interface {
	Alive(ctx context.Context, owner string) (bool, error)
}

// Reaper removes Paddock containers nobody tracks: those of owners whose
// heartbeat is gone, and those of this owner that this process does not
// know (left by an earlier process with the same owner id). It runs at
// Start and every Config.ReapInterval.
type Reaper struct {
	r    *Runtime
	live Liveness
	// OnReap is called with the number of containers removed by a pass.
	OnReap func(n int)

	svc startstop.Service
}

// NewReaper returns a reaper for r's engine.
func NewReaper(r *Runtime, live Liveness) *Reaper { return &Reaper{r: r, live: live} }

// Start runs one pass now, then one every interval. Idempotent.
func (p *Reaper) Start(ctx context.Context) error {
	return p.svc.Start(ctx, startstop.NowAndEvery(p.r.cfg.ReapInterval, func(ctx context.Context) {
		if _, err := p.Reap(ctx); err != nil && ctx.Err() == nil {
			p.r.cfg.Logger.Warn("reaper pass", "err", err)
		}
	}))
}

// Stop ends the loop and waits for it. Idempotent; Start may follow.
func (p *Reaper) Stop() { p.svc.Stop() }

// Reap runs one pass and returns how many containers it removed.
func (p *Reaper) Reap(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	list, err := p.r.docker.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", LabelManaged+"=1"),
	})
	if err != nil {
		return 0, err
	}
	alive := map[string]bool{}
	n := 0
	for _, c := range list.Items {
		owner := c.Labels[LabelOwner]
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		reap := false
		if owner == p.r.cfg.Owner {
			age := time.Since(time.Unix(c.Created, 0))
			reap = !p.r.tracked(name) && age > p.r.cfg.ReapGrace
		} else {
			ok, seen := alive[owner]
			if !seen {
				ok, err = p.live.Alive(ctx, owner)
				if err != nil {
					return n, err // Redis trouble: reap nothing rather than guess
				}
				alive[owner] = ok
			}
			reap = !ok
		}
		if !reap {
			continue
		}
		_, err := p.r.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err == nil || isRemovalInProgress(err) {
			n++
			p.r.cfg.Logger.Info("reaped container", "container", name, "owner", owner)
		}
	}
	if n > 0 && p.OnReap != nil {
		p.OnReap(n)
	}
	p.reapRunDirs(ctx, alive)
	return n, nil
}

// reapRunDirs removes the control directories of dead owners on this host
// (a worker killed with -9 leaves its run directory behind; its boxes were
// ended by their watchdogs and auto-removed by the engine).
func (p *Reaper) reapRunDirs(ctx context.Context, alive map[string]bool) {
	ents, err := os.ReadDir(p.r.cfg.RunDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		owner := e.Name()
		if !e.IsDir() || owner == sanitizeName(p.r.cfg.Owner) {
			continue
		}
		if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < p.r.cfg.ReapGrace {
			continue
		}
		ok, seen := alive[owner]
		if !seen {
			if ok, err = p.live.Alive(ctx, owner); err != nil {
				return
			}
		}
		if !ok {
			_ = os.RemoveAll(filepath.Join(p.r.cfg.RunDir, owner))
		}
	}
}
