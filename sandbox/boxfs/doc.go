// Package boxfs reads and writes files under one directory that hostile
// code controls: the workspace of a sandbox, as paddock-init sees it from
// inside the container, running as the box's unprivileged user.
//
// A Root is the directory opened once. Every later access is relative to a
// directory descriptor, one path element at a time (openat, fstatat,
// mkdirat with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW), so no symlink, no ".."
// and no directory swapped for a symlink between a check and a use can lead
// outside the root: a name is only ever resolved inside a directory already
// opened as a directory. No file is opened for reading or writing before it
// is known to be a regular file, and every open is O_NONBLOCK, so a FIFO
// put in a file's place never blocks the caller; the descriptor is fstat'ed
// after the open and anything but a regular file is refused.
//
// WriteFile puts a job's input files in place; Collect walks the workspace
// for the regular files that artifact patterns (Match) select, within
// Limits, and refuses everything else with a human reason (a Refusal).
//
// The package is stdlib-only and Linux-only, like paddock-init. It does not
// use openat2: a per-element walk is needed anyway to say which element was
// refused and why, and one code path is the one that is tested.
package boxfs
