package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The boxes' CPU weight (Config.CPUShares, CPUSet, DemoteAfter): operator
// settings that keep a host's short jobs and the worker's own path
// responsive while long jobs keep every CPU busy. Each box's CPU cap
// (limits.cpus, a CFS quota) bounds how much CPU it may use; its weight
// decides who runs first when the CPUs are contended. A new box starts,
// and runs its first commands, at CPUShares; a command that has run for
// DemoteAfter demotes its box to DemotedCPUShares for the rest of its
// life (a box is single-use), so a CPU loop, a memory bomb or an output
// flood yields to a box starting (runc and init run in the new box's
// cgroup) and to a short command, while it still gets all the CPU nobody
// else wants.

// Bounds of a cgroup v1 cpu.shares value, as the engine accepts them.
const (
	minCPUShares = 2
	maxCPUShares = 262144
	// defaultDemotedShares is 1/64 of the engine's default weight.
	defaultDemotedShares = 16
)

// cpuSetRE is a cpuset list: "0", "0-3", "0,2-3".
var cpuSetRE = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// checkWeight defaults DemotedCPUShares and validates the CPU weight settings.
func (c *Config) checkWeight() error {
	c.DemotedCPUShares = cmp.Or(c.DemotedCPUShares, defaultDemotedShares)
	switch {
	case c.CPUShares != 0 && (c.CPUShares < minCPUShares || c.CPUShares > maxCPUShares):
		return fmt.Errorf("%w: box cpu shares %d must be 0 (the engine's 1024) or in [%d, %d]", ErrConfig, c.CPUShares, minCPUShares, maxCPUShares)
	case c.DemotedCPUShares < minCPUShares || c.DemotedCPUShares > maxCPUShares:
		return fmt.Errorf("%w: demoted cpu shares %d must be in [%d, %d]", ErrConfig, c.DemotedCPUShares, minCPUShares, maxCPUShares)
	case c.DemoteAfter < 0:
		return fmt.Errorf("%w: demote-after %s is negative (0 turns demotion off)", ErrConfig, c.DemoteAfter)
	case c.CPUSet != "" && !cpuSetRE.MatchString(c.CPUSet):
		return fmt.Errorf("%w: box cpuset %q is not a CPU list such as \"1\" or \"1-3\"", ErrConfig, c.CPUSet)
	}
	return nil
}

// demoteLater demotes s's box once the command just sent has run for
// Config.DemoteAfter; the returned func, called when the command ended,
// cancels a demotion not yet due.
func (s *Session) demoteLater() (stop func()) {
	if s.r.cfg.DemoteAfter <= 0 || s.b.demoted.Load() {
		return func() {}
	}
	t := time.AfterFunc(s.r.cfg.DemoteAfter, func() { s.r.demote(s.b) })
	return func() { t.Stop() }
}

// demote lowers b's CPU weight to Config.DemotedCPUShares, once. A box
// that is gone meanwhile is no error worth more than a debug line.
func (r *Runtime) demote(b *box) {
	if !b.demoted.CompareAndSwap(false, true) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.docker.ContainerUpdate(ctx, b.id, client.ContainerUpdateOptions{
		Resources: &container.Resources{CPUShares: r.cfg.DemotedCPUShares}})
	if err != nil {
		r.cfg.Logger.Debug("box not demoted", "container", b.name, "err", err)
		return
	}
	r.cfg.Logger.Debug("box demoted", "container", b.name, "cpu_shares", r.cfg.DemotedCPUShares)
}
