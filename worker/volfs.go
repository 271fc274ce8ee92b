package worker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel-enforced volume quotas. Each volume a job writes to is a
// filesystem of its own: a sparse ext4 image at <root>/.img/<name>.ext4,
// loop-mounted at <root>/.img/<name>.mnt (root's, 0700 on the way: no box
// ever sees it), whose directory data/ is bind-mounted at <root>/<name>,
// the directory a box bind-mounts at /workspace. A job's writes land on a
// filesystem the kernel holds to its size, and ENOSPC is the kernel's
// answer past its bound, whatever the trick: a file deleted while open
// keeps its blocks, a sparse file allocates what it writes (each block
// counted), a hard link adds no blocks, each small file takes a block
// and an inode.
//
// The wall is exact per job, without unmounting or resizing: beside
// data/, out of every box's sight, the filesystem holds root's reserve
// file, sized before each job so that what the job may still write is its
// bound minus what the volume holds. The image is made to hold the
// worker's cap and only grows (resize2fs online) if the cap was raised
// after it was made. The mounts stay across jobs; deleting the volume
// unmounts them and removes the image. docs/threat-model.md, "Disk
// quotas".

// VolumeQuota is how a worker holds a volume to its byte bound.
type VolumeQuota string

const (
	// QuotaKernel (the default) gives every rw volume a filesystem of its
	// own sized to the bound (volfs.go). A worker that cannot mount one
	// says so at start and refuses rw volume jobs with
	// *QuotaUnavailableError.
	QuotaKernel VolumeQuota = "kernel"
	// QuotaWalk is the operator's explicit fallback for workers that cannot
	// mount (no CAP_SYS_ADMIN or no loop devices): the volume is a plain
	// directory measured by walking it, which a job can step around (a
	// file deleted while open is not seen). Only volume.max_bytes bounds it.
	QuotaWalk VolumeQuota = "walk"
)

// The layout inside a volume's filesystem: the job's data/ and root's
// reserve beside it.
const (
	dataDir     = "data"
	reserveFile = "reserve"
	imgDirName  = ".img"
)

// QuotaUnavailableError: this worker cannot give volumes a filesystem of
// their own (QuotaKernel), so it refuses jobs that write to a volume.
type QuotaUnavailableError struct {
	Root string // the volume root
	Err  error  // why the probe failed
}

func (e *QuotaUnavailableError) Error() string {
	return fmt.Sprintf("worker: volume quotas cannot be enforced by the kernel under %s: %v (the worker needs root with CAP_SYS_ADMIN, /dev/loop-control and e2fsprogs; or run it with --volume-quota=walk to accept a quota measured by walking the volume, which a job can step around)", e.Root, e.Err)
}

func (e *QuotaUnavailableError) Unwrap() error { return e.Err }

// volumeFS makes, mounts, grows and removes the volumes' filesystems under
// one volume root. Every operation on a volume runs under a flock of its
// own (<root>/.img/<name>.lock), so workers sharing a host and the root
// never mount one twice, read-only jobs (which take no volume lock)
// included.
type volumeFS struct {
	root   string
	imgDir string
	// maxPerTenant bounds the images of one tenant (0: no bound).
	maxPerTenant int
}

// TooManyVolumesError refuses a job that would make one more volume than
// its tenant may have on this volume root (Config.MaxVolumesPerTenant).
type TooManyVolumesError struct {
	Tenant    string
	Have, Max int
}

func (e *TooManyVolumesError) Error() string {
	return fmt.Sprintf("tenant %s has %d volumes on this fleet, the most it may have (%d): delete one it no longer needs (a job with volume.delete) before making another",
		e.Tenant, e.Have, e.Max)
}

// newVolumeFS returns the volumeFS of root, creating <root>/.img (0700).
func newVolumeFS(root string) (*volumeFS, error) {
	f := &volumeFS{root: root, imgDir: filepath.Join(root, imgDirName)}
	if err := os.Mkdir(f.imgDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if fi, err := os.Lstat(f.imgDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("worker: %s is not a directory", f.imgDir)
	}
	return f, nil
}

func (f *volumeFS) image(name string) string { return filepath.Join(f.imgDir, name+".ext4") }

// mnt is where volume name's filesystem is mounted, for the worker only.
func (f *volumeFS) mnt(name string) string { return filepath.Join(f.imgDir, name+".mnt") }

// lock takes the flock of volume name's filesystem; unlock with the
// returned function.
func (f *volumeFS) lock(ctx context.Context, name string) (func(), error) {
	fd, err := unix.Open(filepath.Join(f.imgDir, name+".lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("worker: volume fs lock: %w", err)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || ctx.Err() != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("worker: volume fs lock: %w", errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sharedFS names the filesystem types that other hosts may mount too:
// an image there could be mounted by two kernels at once, which corrupts
// it (a volume stays mounted on the host of its last job).
var sharedFS = map[int64]string{
	unix.NFS_SUPER_MAGIC: "nfs", unix.SMB2_SUPER_MAGIC: "smb2", unix.CIFS_SUPER_MAGIC: "cifs",
	unix.FUSE_SUPER_MAGIC: "fuse", unix.CEPH_SUPER_MAGIC: "ceph", unix.V9FS_MAGIC: "9p",
	0x01161970: "gfs2", 0x7461636f: "ocfs2", 0x47504653: "gpfs", 0x0bd00bd0: "lustre",
}

// probe mounts a small filesystem of its own and removes it: whether this
// worker can make volume filesystems at all. A root other hosts may
// share is refused.
func (f *volumeFS) probe(ctx context.Context) error {
	var st unix.Statfs_t
	if err := unix.Statfs(f.root, &st); err != nil {
		return err
	}
	if name, ok := sharedFS[int64(st.Type)]; ok {
		return fmt.Errorf("the volume root is on %s, which other hosts may mount: two kernels mounting one volume's image would corrupt it (give each host a local root)", name)
	}
	dir, err := os.MkdirTemp(f.imgDir, ".probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	img := dir + ".ext4"
	defer os.Remove(img)
	if err := makeImage(ctx, img, 1<<20); err != nil {
		return err
	}
	if err := mountImage(ctx, img, dir); err != nil {
		return err
	}
	return unmount(dir)
}

// mountedFS is a filesystem mounted at a volume's directory.
type mountedFS struct {
	dir    string
	root   string // the directory of the filesystem mounted there
	source string // the loop device
	fstype string
}

// mountAt returns what is mounted at dir (the last mount there), if
// anything, from /proc/self/mountinfo.
func mountAt(dir string) (mountedFS, bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountedFS{}, false, err
	}
	var m mountedFS
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 || unescapeMount(fields[4]) != dir {
			continue
		}
		m, found = mountedFS{dir: dir, root: unescapeMount(fields[3]), fstype: tail[0], source: tail[1]}, true
	}
	return m, found, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a tool of e2fsprogs or util-linux; its output is in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// makeImage makes an ext4 image of size bytes at img (sparse). No
// journal: a journal costs 1 to 4 MiB of every small quota, and the image
// is checked (e2fsck -p) before every mount, which repairs what a host
// crash left. One inode per 16 KiB: many small files run out of blocks
// or inodes, either is ENOSPC. No reserved blocks (-m 0): the reserve
// file is the wall.
func makeImage(ctx context.Context, img string, size int64) error {
	fd, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = fd.Truncate(size)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = run(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-i", "16384", img)
	}
	if err != nil {
		os.Remove(img)
	}
	return err
}

// mountImage checks img and loop-mounts it at dir: nosuid, nodev,
// noatime; discard gives the host back the blocks of deleted files.
func mountImage(ctx context.Context, img, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// -p repairs what is safe; exit 1 means it did.
	if err := run(ctx, "e2fsck", "-p", img); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			return err
		}
	}
	return run(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard", img, dir)
}

// unmount unmounts dir; a mount some process still uses is detached (it
// goes once unused, and the loop device with it).
func unmount(dir string) error {
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH)
	}
	if err != nil {
		return &os.PathError{Op: "umount", Path: dir, Err: err}
	}
	return nil
}

// ensure mounts volume name's filesystem and binds its data at dir,
// what is not there already, making the filesystem (an image of size
// bytes) if it does not exist and create is set (rw). It reports whether
// dir holds the volume's data now: false for a read-only job on a volume
// that never had a filesystem. The caller holds the volume's filesystem
// lock.
func (f *volumeFS) ensure(ctx context.Context, name, dir string, size int64, create bool) (bool, error) {
	fsm, ok, err := f.mountFS(ctx, name, dir, size, create)
	if err != nil || !ok {
		return false, err
	}
	m, ok, err := mountAt(dir)
	switch {
	case err != nil:
		return false, err
	case ok && (m.source != fsm.source || m.root != "/"+dataDir):
		return false, fmt.Errorf("worker: %s has %s of %s mounted on it, not its filesystem's data", dir, m.root, m.source)
	case ok:
		return true, nil
	}
	src := filepath.Join(f.mnt(name), dataDir)
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		return false, &os.PathError{Op: "mount --bind " + src, Path: dir, Err: err}
	}
	return true, nil
}

// mountFS mounts volume name's filesystem at its mnt unless it is there,
// making it if it does not exist and create is set; it reports whether
// the filesystem is mounted now.
func (f *volumeFS) mountFS(ctx context.Context, name, dir string, size int64, create bool) (mountedFS, bool, error) {
	mnt, img := f.mnt(name), f.image(name)
	if m, ok, err := mountAt(mnt); err != nil || ok {
		if ok && (m.fstype != "ext4" || !strings.HasPrefix(m.source, "/dev/loop")) {
			err = fmt.Errorf("worker: %s has a %s filesystem from %s mounted on it, not its image", mnt, m.fstype, m.source)
		}
		return m, ok && err == nil, err
	}
	switch _, err := os.Lstat(img); {
	case err == nil:
		if d, ok, err := mountAt(dir); err != nil || ok {
			// Its data is bound at dir but the filesystem's own mount went
			// (an operator's umount): mount the same device again, never
			// the image through a second loop device (two kernels' views
			// of one filesystem would corrupt it).
			if err == nil {
				if err = os.Mkdir(mnt, 0o700); errors.Is(err, fs.ErrExist) {
					err = nil
				}
			}
			if err == nil {
				err = unix.Mount(d.source, mnt, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "discard")
			}
			if err != nil {
				return mountedFS{}, false, err
			}
		} else if err := mountImage(ctx, img, mnt); err != nil {
			return mountedFS{}, false, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return mountedFS{}, false, err
	case !create:
		return mountedFS{}, false, nil
	default:
		if err := f.create(ctx, img, mnt, dir, size); err != nil {
			return mountedFS{}, false, err
		}
	}
	m, ok, err := mountAt(mnt)
	if err == nil && !ok {
		err = fmt.Errorf("worker: %s is not mounted after its mount", mnt)
	}
	return m, ok, err
}

// ErrVolumeNotEmpty: a volume directory holds files but has no image (a
// walk-mode worker or an older Paddock made it); mounting would hide them.
var ErrVolumeNotEmpty = errors.New("worker: the volume directory holds files but has no filesystem image; migrate it (docs/operations.md, \"Disk quotas\")")

// countVolume takes the lock of volume name's tenant's count (every worker
// of the root counts under it, so two new volumes of one tenant cannot
// both pass the bound) and fails with a *TooManyVolumesError when the
// tenant has maxPerTenant images already. The caller makes the image,
// then calls the unlock it returns.
func (f *volumeFS) countVolume(ctx context.Context, name string) (func(), error) {
	tenant, _, _ := strings.Cut(name, ".")
	if f.maxPerTenant <= 0 {
		return func() {}, nil
	}
	unlock, err := f.lock(ctx, tenant+"@count") // '@' is in no volume name

	if err != nil {
		return nil, err
	}
	imgs, err := filepath.Glob(filepath.Join(f.imgDir, tenant+".*.ext4"))
	if err == nil && len(imgs) >= f.maxPerTenant {
		err = &TooManyVolumesError{Tenant: tenant, Have: len(imgs), Max: f.maxPerTenant}
	}
	if err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// create makes volume name's image (size bytes), mounts it at mnt and
// makes its data directory with dir's owner and mode.
func (f *volumeFS) create(ctx context.Context, img, mnt, dir string, size int64) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if names, err := readNames(dir, 1); err != nil || len(names) > 0 {
		return errors.Join(ErrVolumeNotEmpty, err)
	}
	unlock, err := f.countVolume(ctx, strings.TrimSuffix(filepath.Base(img), ".ext4"))
	if err != nil {
		return err
	}
	defer unlock()
	if err := makeImage(ctx, img, size); err != nil {
		return err
	}
	err = mountImage(ctx, img, mnt)
	if err == nil {
		data := filepath.Join(mnt, dataDir)
		err = errors.Join(os.Mkdir(data, 0o700), os.Chown(data, int(st.Uid), int(st.Gid)), os.Chmod(data, fs.FileMode(st.Mode&0o777)))
		if err != nil {
			err = errors.Join(err, unmount(mnt))
		}
	}
	if err != nil {
		os.Remove(img)
	}
	return err
}

func readNames(dir string, n int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// remove unmounts volume name's data from dir and its filesystem, and
// removes its image (what is there of them). The caller holds the
// volume's filesystem lock.
func (f *volumeFS) remove(name, dir string) error {
	for _, d := range []string{dir, f.mnt(name)} {
		_, ok, err := mountAt(d)
		if err == nil && ok {
			err = unmount(d)
		}
		if err != nil {
			return err
		}
	}
	for _, p := range []string{f.image(name), f.mnt(name)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// fsSpace is a volume filesystem's space as a job sees it.
type fsSpace struct {
	used    int64 // the job's bytes: every allocated block, the reserve's excepted
	avail   int64 // what a job may still write
	reserve int64 // the reserve's bytes
	bsize   int64
}

// spaceOf measures the filesystem mounted at mnt (a volumeFS's mnt).
func spaceOf(mnt string) (fsSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return fsSpace{}, &os.PathError{Op: "statfs", Path: mnt, Err: err}
	}
	var rs unix.Stat_t
	if err := unix.Lstat(filepath.Join(mnt, reserveFile), &rs); err != nil && !errors.Is(err, unix.ENOENT) {
		return fsSpace{}, &os.PathError{Op: "lstat", Path: reserveFile, Err: err}
	}
	bs := st.Frsize
	reserve := rs.Blocks * 512
	return fsSpace{used: (int64(st.Blocks)-int64(st.Bfree))*bs - reserve, avail: int64(st.Bavail) * bs, reserve: reserve, bsize: bs}, nil
}

// setWall makes wall bytes what a job may hold on the filesystem at mnt
// (what it holds plus what it may still write): the reserve takes the
// rest. An image too small for wall (the operator raised
// VolumeMaxBytes after it was made) grows online; where it cannot
// (resize2fs needs CAP_SYS_RESOURCE), the wall is what it holds, and
// setWall returns that lower wall with errNoGrow.
func setWall(ctx context.Context, img, mnt string, wall int64) (fsSpace, int64, error) {
	var growErr error
	var sp fsSpace
	for range 8 {
		var err error
		sp, err = spaceOf(mnt)
		if err != nil {
			return sp, wall, err
		}
		want := max(wall-sp.used, 0) // what the job should be able to write
		if sp.avail <= want && want-sp.avail <= wallSlack(sp) {
			return sp, wall, growErr // never over, short by a few blocks at most
		}
		if room := sp.reserve + sp.avail; room < want {
			if growErr == nil {
				growErr = grow(ctx, img, mnt, want-room)
			}
			if growErr != nil {
				growErr = fmt.Errorf("%w: %w", errNoGrow, growErr)
				wall = sp.used + room
			}
			continue
		}
		if err := sizeReserve(mnt, sp.reserve+sp.avail-want, sp.bsize); err != nil {
			return sp, wall, err
		}
	}
	return sp, wall, fmt.Errorf("worker: the wall of %s did not settle at %d bytes (%d used, %d free, %d reserved)", mnt, wall, sp.used, sp.avail, sp.reserve)
}

// errNoGrow: a volume's image could not grow to its job's bound.
var errNoGrow = errors.New("worker: the volume's image could not grow")

// sizeReserve makes the reserve file of the filesystem at mnt hold n
// bytes of blocks. ext4 may
// refuse one large fallocate near full (ENOSPC with room left, the free
// space in small pieces): a refused chunk is halved down to a block.
func sizeReserve(mnt string, n, bsize int64) error {
	f, err := os.OpenFile(filepath.Join(mnt, reserveFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(n); err != nil {
		return err
	}
	for off, chunk := int64(0), n; off < n && chunk >= bsize; {
		l := min(chunk, n-off)
		switch err := unix.Fallocate(int(f.Fd()), 0, off, l); {
		case err == nil:
			off += l
		case err == unix.ENOSPC:
			chunk /= 2
		default:
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
	return f.Close()
}

// grow adds at least extra bytes to what the filesystem at mnt can hold:
// the image grows (sparse), the loop device learns its new size, and
// resize2fs grows the mounted filesystem.
func grow(ctx context.Context, img, mnt string, extra int64) error {
	m, ok, err := mountAt(mnt)
	if err != nil || !ok {
		return errors.Join(fmt.Errorf("worker: grow %s: not mounted", mnt), err)
	}
	fi, err := os.Stat(img)
	if err != nil {
		return err
	}
	// Metadata takes ~4%: ask for a sixteenth more, in whole MiB.
	size := (fi.Size() + extra + extra/16 + 2<<20) &^ (1<<20 - 1)
	if err := os.Truncate(img, size); err != nil {
		return err
	}
	err = run(ctx, "losetup", "-c", m.source)
	if err == nil {
		err = run(ctx, "resize2fs", m.source)
	}
	if err != nil {
		// The filesystem did not grow: nor does the image (the bound on the
		// host's disk), which holds nothing past the old size.
		err = errors.Join(err, os.Truncate(img, fi.Size()), run(context.WithoutCancel(ctx), "losetup", "-c", m.source))
	}
	return err
}

// imageSize is the first size of an image that should hold bound bytes
// (setWall grows it if that falls short).
func imageSize(bound int64) int64 {
	return max((bound+bound/16+(1<<20))&^(1<<20-1), 2<<20)
}

// wallSlack is how far under its wall a job's room may be: the reserve
// grows in whole blocks, and its extent tree takes a block now and then.
func wallSlack(sp fsSpace) int64 { return 4 * sp.bsize }

// UnmountVolumes unmounts every filesystem mounted under the volume root,
// the last mounted first (the images stay, and the next job of each
// volume mounts its own again): for a host that stops serving root, and
// for tests.
func UnmountVolumes(root string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var dirs []string
	prefix := filepath.Clean(root) + string(filepath.Separator)
	for line := range strings.Lines(string(b)) {
		if fields := strings.Fields(line); len(fields) >= 5 && strings.HasPrefix(unescapeMount(fields[4]), prefix) {
			dirs = append(dirs, unescapeMount(fields[4]))
		}
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		errs = append(errs, unmount(dirs[i]))
	}
	return errors.Join(errs...)
}
