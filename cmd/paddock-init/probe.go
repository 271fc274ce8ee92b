package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

// probe reports what init sees of its own sandbox, for the worker's
// start-up self-test of every limit.
func probe() initproto.Facts {
	f := initproto.Facts{UID: os.Getuid(), Env: os.Environ(), Dumpable: -1}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "NoNewPrivs":
				f.NoNewPrivs = v
			case "CapEff":
				f.CapEff = v
			case "Seccomp":
				f.Seccomp = v
			}
		}
	}
	if d, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0); e == 0 {
		f.Dumpable = int(d)
	}
	// The mount's own flag: a root-owned / would refuse the box's user a
	// new file even on a writable root filesystem.
	var root syscall.Statfs_t
	f.RootWritable = syscall.Statfs("/", &root) != nil || root.Flags&1 == 0 // ST_RDONLY
	f.TmpWritable = canCreate("/tmp/.paddock-probe")
	f.TmpBytes = -1
	var st syscall.Statfs_t
	if syscall.Statfs("/tmp", &st) == nil {
		f.TmpBytes = int64(st.Blocks) * st.Bsize
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			f.Interfaces = append(f.Interfaces, e.Name())
		}
	}
	f.MemoryLimit = readInt("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max")
	switch {
	case exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"):
		f.MemSwapLimit = readInt("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	case exists("/sys/fs/cgroup/memory.swap.max"):
		if swap := readInt("/sys/fs/cgroup/memory.swap.max"); swap >= 0 && f.MemoryLimit >= 0 {
			f.MemSwapLimit = f.MemoryLimit + swap
		} else {
			f.MemSwapLimit = -1
		}
	default:
		f.MemSwapLimit = -2
	}
	f.Swappiness = readInt("/sys/fs/cgroup/memory/memory.swappiness")
	f.HostSwap = hostSwap()
	f.PidsLimit = readInt("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")
	f.CPUQuota, f.CPUPeriod = cpuQuota()
	var rl syscall.Rlimit
	f.NoFile, f.Fsize = -1, -1
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		f.NoFile = rlim(rl.Cur)
	}
	if syscall.Getrlimit(syscall.RLIMIT_FSIZE, &rl) == nil {
		f.Fsize = rlim(rl.Cur)
	}
	f.OOMReadable = oomFile.readKey("oom_kill") >= 0
	f.PidsReadable = pidsFile.readKey("max") >= 0
	return f
}

func rlim(v uint64) int64 {
	if v > 1<<62 {
		return -1 // RLIM_INFINITY
	}
	return int64(v)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// cpuQuota returns the CFS quota and period in µs (-1 when unlimited or
// unknown), from cgroup v1 cpu.cfs_* or v2 cpu.max.
func cpuQuota() (quota, period int64) {
	for _, dir := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
		if exists(dir + "/cpu.cfs_quota_us") {
			return readInt(dir + "/cpu.cfs_quota_us"), readInt(dir + "/cpu.cfs_period_us")
		}
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cpu.max")
	if err != nil {
		return -1, -1
	}
	q, p, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	period, _ = strconv.ParseInt(p, 10, 64)
	if q == "max" {
		return -1, period
	}
	quota, _ = strconv.ParseInt(q, 10, 64)
	return quota, period
}

// hostSwap sums the sizes in /proc/swaps (bytes; -1 unreadable).
func hostSwap() int64 {
	b, err := os.ReadFile("/proc/swaps")
	if err != nil {
		return -1
	}
	var total int64
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 3 {
			continue
		}
		kb, _ := strconv.ParseInt(f[2], 10, 64)
		total += kb << 10
	}
	return total
}

// readInt reads the first existing file of paths as an integer; "max" and
// anything unreadable are -1.
func readInt(paths ...string) int64 {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return -1
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

func canCreate(path string) bool {
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	fd.Close()
	os.Remove(path)
	return true
}
