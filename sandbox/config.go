package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrConfig is wrapped by every invalid Config.
var ErrConfig = errors.New("sandbox: invalid config")

// Config is the operator's sandbox configuration. Zero fields take the
// defaults of the README's Sandbox defaults, filled in withDefaults.
type Config struct {
	// Owner identifies this worker in container labels (reaper ownership).
	Owner string
	// InitPath is the host path of the static paddock-init binary.
	InitPath string
	// Runtime is the OCI runtime ("" = engine default, e.g. runc; "runsc").
	Runtime string
	// User the command runs as (default "1000:1000").
	User string
	// NoFile and FsizeBytes are the nofile and fsize ulimits.
	NoFile     int64
	FsizeBytes int64
	// OutputKillBytes kills a command whose combined output passes it
	// (reason output_cap); the kept output is Command.OutputBytes.
	OutputKillBytes int64
	// PoolSize is the number of warm containers kept per profile in use
	// (0 = 2; negative disables pooling).
	PoolSize int
	// PoolMax caps warm and starting containers across all profiles
	// (default 8). A profile's target grows above PoolSize with its demand
	// and shrinks back when demand falls (the rule is in pool.go).
	PoolMax int
	// PoolStarts bounds how many warm containers the refiller starts at
	// once (default PoolSize, at most PoolMax).
	PoolStarts int
	// PoolWindow is how far back a profile's takes count towards its
	// demand (default 30 s).
	PoolWindow time.Duration
	// PoolIdleTTL retires warm containers and profiles unused this long (default 5 min).
	PoolIdleTTL time.Duration
	// StartTimeout bounds a container's create+start+hello (default 60 s).
	StartTimeout time.Duration
	// RemoveWorkers bounds concurrent background removals (default 2).
	RemoveWorkers int
	// ReapInterval is the reaper period (default 15 s); ReapGrace is the
	// age below which an untracked container of this owner is left alone.
	ReapInterval time.Duration
	ReapGrace    time.Duration
	// InstallTmpfsMB sizes the per-container tmpfs at InstallDir, the one
	// exec-allowed writable place, owned by User, where the heal loop
	// unpacks missing tools (default 256; its pages count against the
	// container's memory limit; negative: no install dir).
	InstallTmpfsMB int64
	// ExtraMounts are host paths bind-mounted read-only into every
	// container, e.g. the heal loop's package source at /.paddock/pkgs.
	// Unlike Profile.Mounts they keep containers poolable.
	ExtraMounts []Mount
	// BrokerSocket gives every box a unix socket at BrokerTarget for the
	// secrets broker: the worker serves a job's grants on it
	// (Session.Broker). Off, nothing is mounted.
	BrokerSocket bool
	// RunDir holds each box's control directory, bind-mounted read-only
	// into the box at /.paddock/ctl for init's private socket. The Docker
	// engine must see it at the same path (default /run/paddock as root,
	// else $TMPDIR/paddock-<uid>). Its path must be short: a unix socket
	// path has at most 107 bytes.
	RunDir string
	// Watchdog is how long init waits for a word from its worker before it
	// kills everything and exits (default 5 s); HeartbeatInterval is how
	// often the worker speaks (default 1 s, at most Watchdog/3).
	Watchdog          time.Duration
	HeartbeatInterval time.Duration
	// CPUShares is every box's CPU weight against the other boxes (cgroup
	// cpu.shares, cpu.weight on cgroup v2; 0: the engine's 1024). CPUSet
	// pins every box to these host CPUs, e.g. "1" on a two-core host keeps
	// CPU 0 for the worker, the engine and the stores ("": all CPUs).
	// Both are in weight.go.
	CPUShares int64
	CPUSet    string
	// DemoteAfter, when > 0, lowers the CPU weight of a box whose command
	// has run this long to DemotedCPUShares (default 16): a long, busy job
	// then yields the CPU to boxes starting and to short commands, and
	// loses nothing while nothing else wants the CPU (shares are relative
	// weights, not caps).
	DemoteAfter      time.Duration
	DemotedCPUShares int64
	Logger           *slog.Logger
}

// withDefaults fills in every zero field and validates the result: the
// one place Config defaults live, each concern by its own method. The
// checks run after the defaults they read, in order; the first failure is
// returned, wrapping ErrConfig.
func (c Config) withDefaults() (Config, error) {
	c.defaultIdentity()
	c.defaultPaths()
	c.defaultLimits()
	c.defaultPool()
	c.defaultTimings()
	if err := c.checkPool(); err != nil {
		return c, err
	}
	if err := c.checkControl(); err != nil {
		return c, err
	}
	if err := c.checkWeight(); err != nil { // weight.go
		return c, err
	}
	if err := c.prepareInstallDir(); err != nil {
		return c, err
	}
	if err := c.cleanExtraMounts(); err != nil {
		return c, err
	}
	if err := c.checkInitPath(); err != nil {
		return c, err
	}
	return c, nil
}

// defaultIdentity names this worker (Owner) and its logger.
func (c *Config) defaultIdentity() {
	if c.Owner == "" {
		h, _ := os.Hostname()
		c.Owner = h + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = c.Logger.With("component", "sandbox")
}

// defaultPaths fills in the host paths: the init binary and the run dir.
func (c *Config) defaultPaths() {
	if c.InitPath == "" {
		c.InitPath = DefaultInitPath()
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir()
	}
}

// defaultLimits fills in what every command runs as and its ulimits.
func (c *Config) defaultLimits() {
	if c.User == "" {
		c.User = "1000:1000"
	}
	c.NoFile = cmp.Or(c.NoFile, 1024)
	c.FsizeBytes = cmp.Or(c.FsizeBytes, 256<<20)
	c.OutputKillBytes = cmp.Or(c.OutputKillBytes, 256<<20)
}

// defaultPool fills in the warm pool's sizes and the removal workers.
func (c *Config) defaultPool() {
	c.PoolSize = cmp.Or(c.PoolSize, 2)
	c.PoolMax = cmp.Or(c.PoolMax, 8)
	c.PoolStarts = min(cmp.Or(c.PoolStarts, max(c.PoolSize, 1)), c.PoolMax)
	c.PoolWindow = cmp.Or(c.PoolWindow, 30*time.Second)
	c.PoolIdleTTL = cmp.Or(c.PoolIdleTTL, 5*time.Minute)
	c.RemoveWorkers = cmp.Or(c.RemoveWorkers, 2)
}

// checkPool validates the warm pool's bounds.
func (c *Config) checkPool() error {
	if c.PoolMax < 0 || c.PoolStarts < 0 || c.PoolWindow < 0 {
		return fmt.Errorf("%w: pool max %d, pool starts %d and pool window %s must not be negative", ErrConfig, c.PoolMax, c.PoolStarts, c.PoolWindow)
	}
	return nil
}

// defaultTimings fills in the start timeout, the reaper's period and grace,
// and init's watchdog with the heartbeat that feeds it.
func (c *Config) defaultTimings() {
	c.StartTimeout = cmp.Or(c.StartTimeout, 60*time.Second)
	c.ReapInterval = cmp.Or(c.ReapInterval, 15*time.Second)
	c.ReapGrace = cmp.Or(c.ReapGrace, time.Minute)
	c.Watchdog = cmp.Or(c.Watchdog, 5*time.Second)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, min(time.Second, c.Watchdog/3))
}

// checkControl validates the control channel to init: the watchdog, the
// heartbeat, and the run directory the control socket lives under.
func (c *Config) checkControl() error {
	switch {
	case c.Watchdog < 500*time.Millisecond:
		return fmt.Errorf("%w: watchdog %s is below 500ms (init would end boxes of a busy worker)", ErrConfig, c.Watchdog)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.Watchdog/3:
		return fmt.Errorf("%w: heartbeat interval %s must be in (0, watchdog/3 = %s]", ErrConfig, c.HeartbeatInterval, c.Watchdog/3)
	case !filepath.IsAbs(c.RunDir):
		return fmt.Errorf("%w: run directory %q must be absolute", ErrConfig, c.RunDir)
	}
	// <run dir>/<owner>/<seq>/init.sock, seq up to 12 digits.
	if n := len(ownerRunDir(c.RunDir, c.Owner)) + len("/123456789012/init.sock"); n > 107 {
		return fmt.Errorf("%w: run directory %q with owner %q makes a socket path of %d bytes; a unix socket path has at most 107: use a shorter --run-dir", ErrConfig, c.RunDir, c.Owner, n)
	}
	return nil
}

// prepareInstallDir defaults the install dir's size and checks that, when
// it is on, User is numeric (its tmpfs is mounted with that uid and gid).
func (c *Config) prepareInstallDir() error {
	c.InstallTmpfsMB = cmp.Or(c.InstallTmpfsMB, 256)
	if c.InstallTmpfsMB > 0 {
		if _, _, ok := numericUser(c.User); !ok {
			return fmt.Errorf("%w: user %q must be numeric uid:gid when the install dir is on (set InstallTmpfsMB < 0 to turn it off)", ErrConfig, c.User)
		}
	}
	return nil
}

// cleanExtraMounts validates ExtraMounts and replaces them with a cleaned,
// read-only copy; on an error they are left as given.
func (c *Config) cleanExtraMounts() error {
	seen, extra := map[string]bool{}, make([]Mount, 0, len(c.ExtraMounts))
	for _, m := range c.ExtraMounts {
		t := filepath.Clean(m.Target)
		switch {
		case !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target):
			return fmt.Errorf("%w: extra mount %s → %s: both paths must be absolute", ErrConfig, m.Source, m.Target)
		case t == "/" || t == InitTarget || t == InstallDir || t == "/tmp" || t == WorkspaceDir ||
			strings.HasPrefix(t, "/tmp/") || strings.HasPrefix(t, WorkspaceDir+"/") || strings.HasPrefix(t, InstallDir+"/") || seen[t]:
			return fmt.Errorf("%w: extra mount target %s collides with a sandbox mount", ErrConfig, m.Target)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("%w: extra mount source: %v", ErrConfig, err)
		}
		seen[t] = true
		extra = append(extra, Mount{Source: m.Source, Target: t, ReadOnly: true})
	}
	c.ExtraMounts = extra // a copy: the caller's slice is not changed
	return nil
}

// checkInitPath checks that InitPath is an absolute path to an executable.
func (c *Config) checkInitPath() error {
	if !filepath.IsAbs(c.InitPath) {
		return fmt.Errorf("%w: init path %q must be absolute", ErrConfig, c.InitPath)
	}
	st, err := os.Stat(c.InitPath)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: init binary %s is missing or not executable (build it with `make build`, or set --init-path / PADDOCK_INIT_PATH)", ErrConfig, c.InitPath)
	}
	return nil
}

// numericUser splits a "uid:gid" (or "uid") user of digits.
func numericUser(u string) (uid, gid string, ok bool) {
	uid, gid, found := strings.Cut(u, ":")
	if !found {
		gid = uid
	}
	isNum := func(s string) bool {
		_, err := strconv.ParseUint(s, 10, 32)
		return err == nil
	}
	return uid, gid, isNum(uid) && isNum(gid)
}

// DefaultInitPath is the first existing of: $PADDOCK_INIT_PATH, a
// paddock-init next to the running executable, /usr/local/lib/paddock/paddock-init.
func DefaultInitPath() string {
	if p := os.Getenv("PADDOCK_INIT_PATH"); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "paddock-init")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "/usr/local/lib/paddock/paddock-init"
}

// DefaultRunDir is $PADDOCK_RUN_DIR, else /run/paddock for root, else
// $TMPDIR/paddock-<uid>.
func DefaultRunDir() string {
	if p := os.Getenv("PADDOCK_RUN_DIR"); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return "/run/paddock"
	}
	return filepath.Join(os.TempDir(), "paddock-"+strconv.Itoa(os.Geteuid()))
}

// Profile is what makes two containers interchangeable: the image and the
// container-level limits. Commands, env and timeouts are per command.
type Profile struct {
	Image    string
	MemoryMB int64
	CPUs     float64
	Pids     int64
	TmpfsMB  int64
	// Mounts are host directories; a profile with mounts is never pooled.
	Mounts []Mount
}

// Mount binds a host directory into the container.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

func (p Profile) withDefaults() Profile {
	p.MemoryMB = cmp.Or(p.MemoryMB, 512)
	p.CPUs = cmp.Or(p.CPUs, 0.5)
	p.Pids = cmp.Or(p.Pids, 64)
	p.TmpfsMB = cmp.Or(p.TmpfsMB, 64)
	return p
}

// key identifies interchangeable containers; "" means not poolable.
func (p Profile) key() string {
	if len(p.Mounts) > 0 {
		return ""
	}
	return fmt.Sprintf("%s|m%d|c%g|p%d|t%d", p.Image, p.MemoryMB, p.CPUs, p.Pids, p.TmpfsMB)
}
