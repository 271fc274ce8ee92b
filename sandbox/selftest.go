package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrSelfTest is wrapped when the host does not enforce a sandbox limit.
var ErrSelfTest = errors.New("sandbox: self-test failed")

// SelfTest starts one container with p and proves from inside it that the
// limits really apply on this host: no network but loopback, read-only root,
// writable /tmp, no capabilities, no-new-privileges, seccomp filtering, the
// memory and pids limits in the container's cgroup, the configured user, and
// an environment with nothing of the worker's. A worker must refuse to start
// when it fails.
func (r *Runtime) SelfTest(ctx context.Context, p Profile) error {
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.StartTimeout)
	defer cancel()
	p = p.withDefaults()
	p.Mounts = nil
	s, err := r.Acquire(ctx, p, SessionOptions{Labels: map[string]string{LabelJob: "self-test"}})
	if err != nil {
		return fmt.Errorf("%w: start probe container: %v", ErrSelfTest, err)
	}
	defer s.Close()
	f, err := s.Probe(ctx)
	if err != nil {
		return fmt.Errorf("%w: probe: %v", ErrSelfTest, err)
	}
	var bad []string
	check := func(ok bool, what string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(what, args...))
		}
	}
	check(f.NoNewPrivs == "1", "NoNewPrivs is %q, want 1", f.NoNewPrivs)
	check(strings.Trim(f.CapEff, "0") == "", "CapEff is %q, want 0", f.CapEff)
	check(f.Seccomp == "2", "Seccomp is %q, want 2 (filter)", f.Seccomp)
	check(!f.RootWritable, "the root filesystem is writable")
	check(f.TmpWritable, "/tmp is not writable")
	for _, i := range f.Interfaces {
		check(i == "lo", "network interface %q present (want only lo)", i)
	}
	check(f.MemoryLimit == p.MemoryMB<<20, "memory limit is %d bytes, want %d", f.MemoryLimit, p.MemoryMB<<20)
	if r.cfg.Runtime != "runsc" {
		check(f.PidsLimit == p.Pids, "pids limit is %d, want %d", f.PidsLimit, p.Pids)
		check(f.CgroupReadable, "the container cannot read its pids cgroup counters (OOM/pids detection would be blind)")
	}
	wantUID := strings.Split(r.cfg.User, ":")[0]
	check(fmt.Sprint(f.UID) == wantUID, "uid is %d, want %s", f.UID, wantUID)
	// The image's ENV may reach init (commands get an explicit env anyway);
	// nothing of the worker's own environment may.
	mine := map[string]bool{}
	for _, kv := range os.Environ() {
		mine[kv] = true
	}
	for _, kv := range f.Env {
		k, _, _ := strings.Cut(kv, "=")
		check(!mine[kv] || k == "PATH" || k == "HOME" || k == "HOSTNAME" || k == "LANG" || k == "TERM",
			"the worker's environment variable %s is visible in the container", k)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w on this host (image %s, runtime %q): %s", ErrSelfTest, p.Image, r.cfg.Runtime, strings.Join(bad, "; "))
	}
	return nil
}
