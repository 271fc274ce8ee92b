package boxfs

import (
	"io"
	"syscall"
)

// fileReader yields the bytes of one collected file: at most the size
// fstat gave when it was opened. Its last Read returns io.EOF only if the
// file still has exactly that size and the same inode, size, mtime and
// ctime; else a *PathError wrapping ErrChanged.
type fileReader struct {
	fd   int
	path string
	left int64
	st0  syscall.Stat_t
	err  error // sticky: io.EOF at a clean end
}

func (f *fileReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.left == 0 {
		f.err = f.end()
		return 0, f.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := retry(func() (int, error) { return syscall.Read(f.fd, p) })
	switch {
	case err != nil:
		f.err = &PathError{Path: f.path, Reason: "read failed: " + errnoReason(err), Err: err}
		return 0, f.err
	case n == 0: // shrank
		f.err = f.changed()
		return 0, f.err
	}
	f.left -= int64(n)
	return n, nil
}

// end checks, once every expected byte was read, that the file is as it
// was: no byte more to read, the same status.
func (f *fileReader) end() error {
	var b [1]byte
	if n, _ := retry(func() (int, error) { return syscall.Read(f.fd, b[:]) }); n > 0 {
		return f.changed()
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return &PathError{Path: f.path, Reason: "fstat failed: " + errnoReason(err), Err: err}
	}
	if st.Ino != f.st0.Ino || st.Size != f.st0.Size || st.Mtim != f.st0.Mtim || st.Ctim != f.st0.Ctim {
		return f.changed()
	}
	return io.EOF
}

func (f *fileReader) changed() error {
	return &PathError{Path: f.path, Reason: "changed while collected", Err: ErrChanged}
}

// finish reads what the caller left unread, so that the file is judged
// whole, and returns the reader's final error (io.EOF when clean).
func (f *fileReader) finish() error {
	var buf [32 << 10]byte
	for f.err == nil {
		_, _ = f.Read(buf[:])
	}
	return f.err
}
