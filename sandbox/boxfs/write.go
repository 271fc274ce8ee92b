package boxfs

import (
	"fmt"
	"io"
	"strings"
	"syscall"
)

// WriteFile writes size bytes from src to rel (CheckPath) with permission
// mode (0400..0777). Missing parent directories are created 0755 (less the
// umask); a parent that is a symlink or not a directory is refused, as is a
// target that exists and is anything but a regular file. An existing
// regular file is truncated and rewritten in place (the workspace may be a
// shared volume), unless it has other hard links: it is then replaced, so
// that no other name of it changes. Exactly size bytes are read from src,
// never more; a src that ends early is an error. On any error after the
// file was opened, the file is removed, not left half written. Errors are
// *PathError.
func (r *Root) WriteFile(rel string, mode uint32, size int64, src io.Reader) error {
	if err := CheckPath(rel); err != nil {
		return &PathError{Path: rel, Reason: "invalid path: " + err.Error()}
	}
	if mode&^0o777 != 0 || mode&0o400 == 0 {
		return &PathError{Path: rel, Reason: fmt.Sprintf("mode %#o is out of range; allowed 0400..0777 (owner-readable, no setuid, setgid or sticky bit)", mode)}
	}
	if size < 0 {
		return &PathError{Path: rel, Reason: fmt.Sprintf("size %d is negative", size)}
	}
	elems := strings.Split(rel, "/")
	dir, err := r.openParents(rel, elems[:len(elems)-1])
	if err != nil {
		return err
	}
	defer closeFd(dir)
	base := elems[len(elems)-1]
	fd, err := createFile(dir, rel, base, mode)
	if err != nil {
		return err
	}
	err = fill(fd, rel, size, src)
	closeFd(fd)
	if err != nil {
		_ = syscall.Unlinkat(dir, base)
	}
	return err
}

// openParents opens the directory that holds rel, walking parents from
// the root one by one and creating those that are missing.
func (r *Root) openParents(rel string, parents []string) (int, error) {
	cur, err := r.fresh()
	if err != nil {
		return -1, &PathError{Path: rel, Reason: "cannot open the workspace: " + errnoReason(err), Err: err}
	}
	for i, name := range parents {
		next, err := openOrMkdir(cur, rel, strings.Join(parents[:i+1], "/"), name)
		closeFd(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// openOrMkdir opens the directory name in dirfd (whose path is parent,
// for messages), creating it if it is missing.
func openOrMkdir(dirfd int, rel, parent, name string) (int, error) {
	for range 3 {
		fd, err := openDir(dirfd, name)
		if err == nil {
			return fd, nil
		}
		if err != syscall.ENOENT {
			var st syscall.Stat_t
			reason := fmt.Sprintf("cannot open parent %q: %s", parent, errnoReason(err))
			if lstatAt(dirfd, name, &st) == nil && st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				reason = fmt.Sprintf("parent %q %s", parent, refuseKind(st.Mode, "a directory"))
			}
			return -1, &PathError{Path: rel, Reason: reason, Err: err}
		}
		_, err = retry(func() (int, error) { return 0, syscall.Mkdirat(dirfd, name, 0o755) })
		if err != nil && err != syscall.EEXIST {
			return -1, &PathError{Path: rel, Reason: fmt.Sprintf("cannot create directory %q: %s", parent, errnoReason(err)), Err: err}
		}
	}
	return -1, &PathError{Path: rel, Reason: fmt.Sprintf("directory %q keeps vanishing as it is created", parent)}
}

// createFile opens base in dir for writing, empty, with mode: created if
// missing, truncated if it is a regular file of one link, replaced if it
// has more, refused if it is anything else.
func createFile(dir int, rel, base string, mode uint32) (int, error) {
	var st syscall.Stat_t
	switch err := lstatAt(dir, base, &st); {
	case err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return -1, &PathError{Path: rel, Reason: "exists and " + refuseKind(st.Mode, "a regular file")}
	case err == nil && st.Nlink > 1:
		if err := syscall.Unlinkat(dir, base); err != nil && err != syscall.ENOENT {
			return -1, &PathError{Path: rel, Reason: "has other hard links and cannot be replaced: " + errnoReason(err), Err: err}
		}
	case err != nil && err != syscall.ENOENT:
		return -1, &PathError{Path: rel, Reason: errnoReason(err), Err: err}
	}
	fd, err := retry(func() (int, error) { return syscall.Openat(dir, base, writeFlags, mode) })
	if err != nil {
		return -1, &PathError{Path: rel, Reason: "cannot create: " + errnoReason(err), Err: err}
	}
	fail := func(reason string, err error) (int, error) {
		closeFd(fd)
		return -1, &PathError{Path: rel, Reason: reason, Err: err}
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		return fail(errnoReason(err), err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fail("exists and "+refuseKind(st.Mode, "a regular file"), nil)
	}
	if st.Nlink > 1 {
		return fail(fmt.Sprintf("has %d hard links; not overwritten", st.Nlink), nil)
	}
	if err := syscall.Ftruncate(fd, 0); err != nil {
		return fail("cannot truncate: "+errnoReason(err), err)
	}
	// Explicitly: the umask, or an existing file, would leave another mode.
	if err := syscall.Fchmod(fd, mode); err != nil {
		return fail(fmt.Sprintf("cannot set mode %#o: %s", mode, errnoReason(err)), err)
	}
	return fd, nil
}

// fill copies exactly size bytes of src to fd.
func fill(fd int, rel string, size int64, src io.Reader) error {
	w := &fdWriter{fd: fd}
	n, err := io.CopyN(w, src, size)
	switch {
	case w.err != nil:
		return &PathError{Path: rel, Reason: errnoReason(w.err), Err: w.err}
	case err == io.EOF:
		return &PathError{Path: rel, Reason: fmt.Sprintf("the input ended after %d of %d bytes", n, size), Err: io.ErrUnexpectedEOF}
	case err != nil:
		return &PathError{Path: rel, Reason: "reading the input: " + err.Error(), Err: err}
	}
	return nil
}

// fdWriter writes to a descriptor, remembering its first error.
type fdWriter struct {
	fd  int
	err error
}

func (w *fdWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := retry(func() (int, error) { return syscall.Write(w.fd, p[done:]) })
		if err != nil {
			w.err = err
			return done, err
		}
		if n == 0 {
			w.err = io.ErrShortWrite
			return done, w.err
		}
		done += n
	}
	return done, nil
}
