package boxfs

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
)

// ErrChanged marks a collected file that changed while it was read: it
// grew, shrank or was rewritten. The bytes read from it must be dropped.
var ErrChanged = errors.New("boxfs: file changed while collected")

// PathError is a refused or failed access to Path (relative to the root,
// or the root itself for Open). Reason says why in words a user can act
// on; Err, when set, is the underlying errno or ErrChanged.
type PathError struct {
	Path   string
	Reason string
	Err    error
}

func (e *PathError) Error() string { return "boxfs: " + strconv.Quote(e.Path) + ": " + e.Reason }
func (e *PathError) Unwrap() error { return e.Err }

// Root is a directory opened once; every access through it stays inside
// it. Its methods may be called concurrently; Close must be the last.
type Root struct {
	fd  int
	dir string
}

// Open opens dir, which must be a directory and not a symlink. An error is
// a *PathError; a missing dir gives one that errors.Is os.ErrNotExist.
func Open(dir string) (*Root, error) {
	fd, err := retry(func() (int, error) {
		return syscall.Open(dir, dirFlags, 0)
	})
	if err != nil {
		reason := errnoReason(err)
		var st syscall.Stat_t
		if (err == syscall.ELOOP || err == syscall.ENOTDIR) && syscall.Lstat(dir, &st) == nil {
			reason = refuseKind(st.Mode, "a directory")
		}
		return nil, &PathError{Path: dir, Reason: reason, Err: err}
	}
	return &Root{fd: fd, dir: dir}, nil
}

// Close closes the root's descriptor.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := syscall.Close(r.fd)
	r.fd = -1
	return err
}

// The flags of every open: a directory is opened only as a directory, a
// file only if it is no symlink, and no open ever waits (a FIFO opened
// O_NONBLOCK returns at once; fstat then refuses it).
const (
	dirFlags  = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	readFlags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_NOCTTY | syscall.O_CLOEXEC
	// O_CREAT without O_TRUNC: the file is truncated once fstat said it
	// is a regular file.
	writeFlags = syscall.O_WRONLY | syscall.O_CREAT | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_NOCTTY | syscall.O_CLOEXEC

	atSymlinkNofollow = 0x100 // AT_SYMLINK_NOFOLLOW (unexported by package syscall)
)

// fresh opens the root directory again, with its own offset for getdents.
func (r *Root) fresh() (int, error) {
	return openDir(r.fd, ".")
}

func openDir(dirfd int, name string) (int, error) {
	return retry(func() (int, error) { return syscall.Openat(dirfd, name, dirFlags, 0) })
}

// lstatAt stats name in dirfd without following a symlink.
func lstatAt(dirfd int, name string, st *syscall.Stat_t) error {
	_, err := retry(func() (int, error) { return 0, fstatat(dirfd, name, st, atSymlinkNofollow) })
	return err
}

// retry runs a system call again while it is interrupted by a signal.
func retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

func closeFd(fd int) { _ = syscall.Close(fd) }

// kind names the file type of mode.
func kind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "regular file"
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFLNK:
		return "symlink"
	case syscall.S_IFIFO:
		return "fifo"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	}
	return "file of unknown type"
}

// refuseKind says why a file of mode is not the want ("a directory", "a
// regular file") it had to be.
func refuseKind(mode uint32, want string) string {
	if mode&syscall.S_IFMT == syscall.S_IFLNK {
		return "is a symlink; not followed"
	}
	return fmt.Sprintf("is a %s, not %s", kind(mode), want)
}

// errnoText gives the errors a caller may meet in words, with the errno.
var errnoText = map[syscall.Errno]string{
	syscall.ENOSPC:       "workspace full (ENOSPC)",
	syscall.EDQUOT:       "disk quota exceeded (EDQUOT)",
	syscall.EFBIG:        "over the box's file size limit (EFBIG)",
	syscall.EROFS:        "the workspace is read-only (EROFS)",
	syscall.EACCES:       "permission denied (EACCES)",
	syscall.EPERM:        "operation not permitted (EPERM)",
	syscall.ENOENT:       "does not exist (ENOENT)",
	syscall.EMFILE:       "too many open files (EMFILE)",
	syscall.ENFILE:       "too many open files in the system (ENFILE)",
	syscall.ENAMETOOLONG: "name too long (ENAMETOOLONG)",
	syscall.EIO:          "I/O error (EIO)",
	syscall.ELOOP:        "is a symlink; not followed (ELOOP)",
	syscall.ENOTDIR:      "not a directory (ENOTDIR)",
	syscall.ENXIO:        "not a regular file (ENXIO: a socket, or a device without its driver)",
}

// errnoReason words err (an errno, usually).
func errnoReason(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if s, ok := errnoText[e]; ok {
			return s
		}
	}
	return err.Error()
}
