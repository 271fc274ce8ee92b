package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Mode says how a job uses a volume.
type Mode uint8

const (
	// RW: the job writes. It takes the volume's Redis lease, then its flock,
	// and carries a fencing token.
	RW Mode = iota + 1
	// RO: the job only reads (the worker mounts the directory read-only). It
	// takes no lock at all, not even a shared flock: see Guard.Acquire.
	RO
)

func (m Mode) String() string {
	switch m {
	case RW:
		return "rw"
	case RO:
		return "ro"
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// Defaults of GuardConfig.
const (
	DefaultLeaseTTL       = 15 * time.Second
	DefaultWait           = 30 * time.Second
	DefaultReleaseTimeout = 10 * time.Second
	DefaultVolumeUID      = 1000 // the sandbox user (DESIGN §3)
	DefaultVolumeGID      = 1000
	DefaultDirPerm        = 0o750
)

// GuardConfig tunes a Guard; a zero field means its default.
type GuardConfig struct {
	// Root is the operator's volume root (required; it must exist). Its
	// symlinks are resolved once, by NewGuard. Layout:
	//
	//	<Root>/<name>/             the volume, mounted at /workspace
	//	<Root>/.locks/<name>.lock  its flock file (see LockDir)
	//	<Root>/.locks/<name>.fence its fence file: the highest fencing token
	//
	// Only the fleet's user may write to Root: a job sees its volume's
	// directory only, never Root or .locks.
	Root string

	// LockDir holds the flock files (default <Root>/.locks). On a shared
	// file system without working flock, point it at a local directory: the
	// Redis lease still excludes other hosts, the flock then only other
	// workers on this host. Fence files stay in <Root>/.locks, beside the
	// data, where every host sees them.
	LockDir string

	// LeaseTTL is the Redis lease's ttl (default 15 s): how long a crashed
	// or partitioned holder blocks the volume. The watchdog refreshes at
	// LeaseTTL/3.
	LeaseTTL time.Duration

	// Wait bounds Acquire's wait for the lease and the flock together
	// (default 30 s); NoWait (any negative value) makes a single attempt.
	Wait time.Duration

	// ReleaseTimeout bounds Held.Release, which runs on its own detached
	// context (default 10 s).
	ReleaseTimeout time.Duration

	// UID and GID own each volume directory (default 1000:1000, the sandbox
	// user); -1 leaves ownership alone. Root (0) cannot be chosen: jobs never
	// run as root.
	UID, GID int

	// DirPerm is the mode of a volume directory the Guard creates (default
	// 0750: the sandbox user writes, its group reads, others nothing).
	DirPerm os.FileMode

	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Guard hands out volume directories under a root, with the locks their
// mode needs. It is safe for concurrent use.
type Guard struct {
	leaser   *Leaser
	cfg      GuardConfig
	root     string // Root with symlinks resolved
	fenceDir string // <root>/.locks
	log      *slog.Logger

	chownWarned atomic.Bool
}

// NewGuard returns a Guard taking leases from leaser. Config errors wrap
// ErrInvalid.
func NewGuard(leaser *Leaser, cfg GuardConfig) (*Guard, error) {
	if leaser == nil {
		return nil, fmt.Errorf("%w: nil Leaser", ErrInvalid)
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("%w: empty volume root", ErrInvalid)
	}
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, DefaultLeaseTTL)
	cfg.Wait = cmp.Or(cfg.Wait, DefaultWait)
	cfg.ReleaseTimeout = cmp.Or(cfg.ReleaseTimeout, DefaultReleaseTimeout)
	cfg.UID = cmp.Or(cfg.UID, DefaultVolumeUID)
	cfg.GID = cmp.Or(cfg.GID, DefaultVolumeGID)
	cfg.DirPerm = cmp.Or(cfg.DirPerm, DefaultDirPerm)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.LeaseTTL < MinTTL:
		return nil, fmt.Errorf("%w: lease ttl %s is below %s", ErrInvalid, cfg.LeaseTTL, MinTTL)
	case cfg.ReleaseTimeout < 0:
		return nil, fmt.Errorf("%w: negative release timeout %s", ErrInvalid, cfg.ReleaseTimeout)
	case cfg.UID < -1 || cfg.GID < -1:
		return nil, fmt.Errorf("%w: volume owner %d:%d", ErrInvalid, cfg.UID, cfg.GID)
	case cfg.DirPerm&^fs.ModePerm != 0:
		return nil, fmt.Errorf("%w: volume dir mode %s", ErrInvalid, cfg.DirPerm)
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("%w: volume root: %v", ErrInvalid, err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: volume root: %v", ErrInvalid, err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: volume root %s is not a directory", ErrInvalid, root)
	}
	g := &Guard{leaser: leaser, root: root, fenceDir: filepath.Join(root, ".locks"),
		log: cfg.Logger.With("component", "locks.guard")}
	if err := mkdirPrivate(g.fenceDir); err != nil {
		return nil, err
	}
	if cfg.LockDir == "" {
		cfg.LockDir = g.fenceDir
	} else {
		if err := os.MkdirAll(cfg.LockDir, 0o700); err != nil {
			return nil, fmt.Errorf("locks: lock dir: %w", err)
		}
		if cfg.LockDir, err = filepath.Abs(cfg.LockDir); err == nil {
			cfg.LockDir, err = filepath.EvalSymlinks(cfg.LockDir)
		}
		if err != nil {
			return nil, fmt.Errorf("locks: lock dir: %w", err)
		}
	}
	g.cfg = cfg
	return g, nil
}

// mkdirPrivate creates dir (mode 0700) if missing and checks that it is a
// real directory, not a symlink to somewhere else.
func mkdirPrivate(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("locks: create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("locks: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (symlink?)", ErrInvalid, dir)
	}
	return nil
}

// Root returns the volume root with its symlinks resolved.
func (g *Guard) Root() string { return g.root }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateName checks a volume name: 1 to 64 characters of [A-Za-z0-9._-],
// starting with a letter or digit, without "..". A valid name is a single
// path component that is neither "." nor "..", and never hidden, so it
// cannot collide with .locks. Failures are *NameError wrapping ErrInvalid.
func ValidateName(name string) error {
	switch {
	case name == "":
		return &NameError{Name: name, Reason: "empty name"}
	case !nameRE.MatchString(name):
		return &NameError{Name: name, Reason: "must match " + nameRE.String()}
	case strings.Contains(name, ".."):
		return &NameError{Name: name, Reason: `must not contain ".."`}
	}
	return nil
}

// Held is a volume handed out by Guard.Acquire. Release it when the job ends.
type Held struct {
	name      string
	mode      Mode
	dir       string
	fencePath string
	token     int64
	waited    time.Duration
	lease     *Lease    // nil for RO
	flock     *FileLock // nil for RO

	releaseTimeout time.Duration
	once           sync.Once
	err            error
}

// neverLost is the Lost channel of a read-only Held: it never closes.
var neverLost = make(chan struct{})

// Acquire validates name, makes sure <Root>/<name> is a real directory
// directly under the root (creating it, owned by UID:GID, if missing; a
// symlink there is refused, never followed) and returns it held in mode.
//
// RW takes, in this order and within the Guard's Wait: the Redis lease on
// resource "volume:"+name (its fencing token is recorded in the volume's
// fence file, so from now on the previous holder's fenced writes fail), then
// an exclusive flock on <LockDir>/<name>.lock. If the flock is not obtained
// the lease is released again. A *TimeoutError says which of the two was
// busy.
//
// RO takes no lock. Not even a shared flock: that would only exclude
// writers on the same host (a writer elsewhere holds just the lease), let a
// long read-only job block writers for its whole session, and let readers
// starve writers (flock has no writer preference). A read-only job sees the
// volume as it is, possibly mid-update; the mount being read-only, it
// cannot corrupt it.
func (g *Guard) Acquire(ctx context.Context, name string, mode Mode) (*Held, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if mode != RW && mode != RO {
		return nil, fmt.Errorf("%w: volume mode %s", ErrInvalid, mode)
	}
	start := time.Now()
	dir, err := g.ensureDir(name)
	if err != nil {
		return nil, err
	}
	h := &Held{name: name, mode: mode, dir: dir, releaseTimeout: g.cfg.ReleaseTimeout,
		fencePath: filepath.Join(g.fenceDir, name+".fence")}
	if mode == RO {
		h.waited = time.Since(start)
		return h, nil
	}

	// The storage's highest token is the floor of the fencing counter, so a
	// counter that went back (Redis lost data) jumps past it.
	lease, err := g.leaser.obtain(ctx, "volume:"+name, g.cfg.LeaseTTL, g.cfg.Wait, fenceHint(h.fencePath))
	if err != nil {
		return nil, err
	}
	h.lease, h.token = lease, lease.Token()

	timeout := g.cfg.Wait - time.Since(start)
	if timeout <= 0 {
		timeout = NoWait
	}
	h.flock, err = AcquireFile(ctx, filepath.Join(g.cfg.LockDir, name+".lock"), FileOptions{Timeout: timeout})
	if err != nil {
		return nil, h.abandon(err)
	}
	// Recording the token waits only for a fenced write in progress; give it
	// the rest of the budget, and at least a second.
	fctx, cancel := context.WithTimeout(ctx, max(g.cfg.Wait-time.Since(start), time.Second))
	defer cancel()
	if err := CheckAndRecord(fctx, h.fencePath, h.token); err != nil {
		return nil, h.abandon(err)
	}
	h.waited = time.Since(start)
	g.log.Debug("volume held", "volume", name, "mode", mode, "token", h.token, "waited", h.waited)
	return h, nil
}

// abandon releases what a failed Acquire took and returns err, joined with
// the release's error if any.
func (h *Held) abandon(err error) error {
	if rerr := h.Release(); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// ensureDir returns <root>/<name>, a real directory owned by UID:GID,
// creating it if missing.
func (g *Guard) ensureDir(name string) (string, error) {
	dir := filepath.Join(g.root, name)
	created := false
	switch err := os.Mkdir(dir, g.cfg.DirPerm); {
	case err == nil:
		created = true
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("locks: create volume dir: %w", err)
	}
	// O_NOFOLLOW: a symlink at <root>/<name> (dangling or not) fails here
	// instead of leading out of the root. Ownership and mode are changed
	// through the descriptor, so they cannot be redirected either.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return "", &NameError{Name: name, Reason: "is a symlink or not a directory under the volume root"}
	case err != nil:
		return "", fmt.Errorf("locks: open volume dir: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("locks: stat volume dir %s: %w", dir, err)
	}
	if created {
		// Mkdir's mode went through the umask.
		if err := unix.Fchmod(fd, uint32(g.cfg.DirPerm)); err != nil {
			return "", fmt.Errorf("locks: chmod volume dir %s: %w", dir, err)
		}
	}
	if (g.cfg.UID >= 0 && int(st.Uid) != g.cfg.UID) || (g.cfg.GID >= 0 && int(st.Gid) != g.cfg.GID) {
		if err := unix.Fchown(fd, g.cfg.UID, g.cfg.GID); err != nil {
			if !errors.Is(err, unix.EPERM) {
				return "", fmt.Errorf("locks: chown volume dir %s: %w", dir, err)
			}
			// Not root: the volume stays ours. Jobs can write to it only if
			// we happen to be the sandbox user (a typical dev box).
			if g.chownWarned.CompareAndSwap(false, true) {
				g.log.Warn("cannot chown volume directories to the sandbox user: jobs may not be able to write",
					"dir", dir, "uid", g.cfg.UID, "gid", g.cfg.GID, "err", err)
			}
		}
	}
	// Belt and braces: the resolved path is the one we built.
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return "", &NameError{Name: name, Reason: "resolves outside the volume root"}
	}
	return dir, nil
}

// Name returns the volume's name.
func (h *Held) Name() string { return h.name }

// Mode returns the mode the volume is held in.
func (h *Held) Mode() Mode { return h.mode }

// Dir returns the volume's host directory, to mount at /workspace
// (read-only for RO).
func (h *Held) Dir() string { return h.dir }

// FencingToken returns the lease's fencing token (0 for RO), to pass to the
// job as PADDOCK_FENCING_TOKEN and record on the result.
func (h *Held) FencingToken() int64 { return h.token }

// FencePath returns the volume's fence file, for storage code that fences
// its writes with FencedWrite.
func (h *Held) FencePath() string { return h.fencePath }

// Waited returns how long Acquire took, waits for the locks included.
func (h *Held) Waited() time.Duration { return h.waited }

// Lost returns a channel closed when the RW lease is lost: the worker must
// then kill the job's container (state lease_lost). For RO it never closes.
func (h *Held) Lost() <-chan struct{} {
	if h.lease == nil {
		return neverLost
	}
	return h.lease.Lost()
}

// Err returns why the lease was lost, or nil.
func (h *Held) Err() error {
	if h.lease == nil {
		return nil
	}
	return h.lease.Err()
}

// FencedWrite runs write under the volume's fence with this holder's token
// (see the package function FencedWrite). It fails with ErrStaleToken once a
// newer holder has acquired the volume.
func (h *Held) FencedWrite(ctx context.Context, write func() error) error {
	if h.mode != RW {
		return fmt.Errorf("%w: volume %s is held read-only", ErrNotHeld, h.name)
	}
	return FencedWrite(ctx, h.fencePath, h.token, write)
}

// Release drops the flock, then the lease, on a detached context with its
// own deadline (GuardConfig.ReleaseTimeout), so a canceled job never leaves
// a lock behind. An error wrapping ErrNotHeld means the lease had already
// been lost. It is idempotent: later calls return the first call's result.
func (h *Held) Release() error {
	h.once.Do(func() {
		var errs []error
		if h.flock != nil {
			errs = append(errs, h.flock.Release())
		}
		if h.lease != nil {
			ctx, cancel := context.WithTimeout(context.Background(), h.releaseTimeout)
			defer cancel()
			errs = append(errs, h.lease.Release(ctx))
		}
		h.err = errors.Join(errs...)
	})
	return h.err
}
