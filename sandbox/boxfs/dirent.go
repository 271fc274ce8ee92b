package boxfs

import (
	"bytes"
	"encoding/binary"
	"syscall"
)

// A dirent is one entry of a directory: its name and its d_type
// (syscall.DT_*; DT_UNKNOWN on file systems that do not report it).
type dirent struct {
	name string
	typ  uint8
}

// readDirents reads the entries of the directory fd, "." and ".." left
// out, in the kernel's order, at most max of them; more tells whether
// there were others.
func readDirents(fd, max int) (ents []dirent, more bool, err error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := retry(func() (int, error) { return syscall.Getdents(fd, buf) })
		if err != nil || n <= 0 {
			return ents, false, err
		}
		// struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16,
		// d_type u8, d_name NUL-terminated.
		for off := 0; off < n; {
			if off+19 > n {
				return ents, false, syscall.EIO
			}
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return ents, false, syscall.EIO
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			typ := buf[off+18]
			off += reclen
			if string(name) == "." || string(name) == ".." || len(name) == 0 {
				continue
			}
			if len(ents) == max {
				return ents, true, nil
			}
			ents = append(ents, dirent{name: string(name), typ: typ})
		}
	}
}

// direntType is the d_type of a file of mode.
func direntType(mode uint32) uint8 {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return syscall.DT_REG
	case syscall.S_IFDIR:
		return syscall.DT_DIR
	case syscall.S_IFLNK:
		return syscall.DT_LNK
	case syscall.S_IFIFO:
		return syscall.DT_FIFO
	case syscall.S_IFSOCK:
		return syscall.DT_SOCK
	case syscall.S_IFCHR:
		return syscall.DT_CHR
	case syscall.S_IFBLK:
		return syscall.DT_BLK
	}
	return syscall.DT_UNKNOWN
}

// typeName names a d_type for a refusal.
func typeName(typ uint8) string {
	switch typ {
	case syscall.DT_FIFO:
		return "fifo"
	case syscall.DT_SOCK:
		return "socket"
	case syscall.DT_CHR:
		return "character device"
	case syscall.DT_BLK:
		return "block device"
	case syscall.DT_DIR:
		return "directory"
	case syscall.DT_LNK:
		return "symlink"
	case syscall.DT_REG:
		return "regular file"
	}
	return "file of unknown type"
}
