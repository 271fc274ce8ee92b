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

// SelfTest starts one container with p and proves from inside it that every
// limit really applies on this host: no network but loopback, read-only
// root, writable /tmp of the profile's size, no capabilities,
// no-new-privileges, seccomp filtering, init not dumpable, the memory limit
// with no swap, the CPU quota, the pids limit, the nofile and fsize
// ulimits, readable OOM and pids counters, the configured user, and an
// environment with nothing of the worker's. A worker must refuse to start
// when it fails; the error names every limit that did not hold.
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
	check(f.NoNewPrivs == "1", "no-new-privileges: NoNewPrivs is %q, want 1", f.NoNewPrivs)
	check(strings.Trim(f.CapEff, "0") == "", "capabilities: CapEff is %q, want 0", f.CapEff)
	check(f.Seccomp == "2", "seccomp: Seccomp is %q, want 2 (filter)", f.Seccomp)
	check(f.Dumpable == 0, "init protection: init is dumpable (%d), so the job could open its descriptors", f.Dumpable)
	check(!f.RootWritable, "read-only root: the root filesystem is writable")
	check(f.TmpWritable, "tmpfs: /tmp is not writable")
	check(f.TmpBytes == p.TmpfsMB<<20, "tmpfs size: /tmp holds %d bytes, want %d", f.TmpBytes, p.TmpfsMB<<20)
	for _, i := range f.Interfaces {
		check(i == "lo", "network: interface %q present (want only lo)", i)
	}
	check(f.MemoryLimit == p.MemoryMB<<20, "memory: limit is %d bytes, want %d", f.MemoryLimit, p.MemoryMB<<20)
	switch {
	case f.MemSwapLimit >= 0:
		check(f.MemSwapLimit == f.MemoryLimit, "swap: memory+swap limit is %d bytes, want %d (swap = 0)", f.MemSwapLimit, f.MemoryLimit)
	case f.MemSwapLimit == -2:
		// The kernel does not account swap: safe only if there is none.
		check(f.HostSwap == 0 || f.Swappiness == 0, "swap: the kernel does not limit swap (no memsw accounting) and the host has %d bytes of swap with swappiness %d", f.HostSwap, f.Swappiness)
	default:
		check(false, "swap: unlimited (memory+swap limit unset)")
	}
	wantQuota := int64(p.CPUs * float64(f.CPUPeriod))
	check(f.CPUPeriod > 0 && f.CPUQuota > 0 && absDiff(f.CPUQuota, wantQuota) <= 1000,
		"cpu: CFS quota %dµs per %dµs period, want %.2f CPUs", f.CPUQuota, f.CPUPeriod, p.CPUs)
	check(f.NoFile == r.cfg.NoFile, "nofile: RLIMIT_NOFILE is %d, want %d", f.NoFile, r.cfg.NoFile)
	check(f.Fsize == r.cfg.FsizeBytes, "fsize: RLIMIT_FSIZE is %d bytes, want %d", f.Fsize, r.cfg.FsizeBytes)
	check(f.OOMReadable, "oom counter: the container cannot read its memory cgroup's oom_kill counter (OOM detection would be blind)")
	if r.cfg.Runtime != "runsc" {
		check(f.PidsLimit == p.Pids, "pids: limit is %d, want %d", f.PidsLimit, p.Pids)
		check(f.PidsReadable, "pids counter: the container cannot read its pids cgroup events (fork-bomb detection would be blind)")
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

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}
