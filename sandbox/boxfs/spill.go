package boxfs

import (
	"os"
	"strings"
)

// SpillDir is the directory under the root that Spill writes to (a mirror
// of job.SpillDir): under .paddock/, which no file or artifact of a job
// may name, so nothing a spec sends can collide with it.
const SpillDir = ".paddock/out"

// Spill creates (or empties) the file name in SpillDir, creating the
// directories on the way, for init to write a command's output into. The
// walk follows no symlink and the file must be a regular file of one link
// (WriteFile's rules): the box may have planted anything at that path.
// name is one element (a job id and a stream, "<id>.stdout"). Errors are
// *PathError.
func (r *Root) Spill(name string) (*os.File, error) {
	rel := SpillDir + "/" + name
	if err := CheckPath(name); err != nil || strings.Contains(name, "/") {
		return nil, &PathError{Path: rel, Reason: "invalid spill name"}
	}
	dir, err := r.openParents(rel, strings.Split(SpillDir, "/"))
	if err != nil {
		return nil, err
	}
	defer closeFd(dir)
	fd, err := createFile(dir, rel, name, 0o644)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}
