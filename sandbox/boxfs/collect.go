package boxfs

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
)

// Limits bound a Collect; a zero (or negative) field means its default.
type Limits struct {
	MaxFiles      int   // files collected (default DefaultMaxFiles)
	MaxFileBytes  int64 // bytes of one file (default DefaultMaxFileBytes)
	MaxTotalBytes int64 // bytes of all files (default DefaultMaxTotalBytes)
	// MaxVisit bounds the directory entries looked at (default
	// DefaultMaxVisit): the walk stops there, with one Refusal.
	MaxVisit int
	// MaxRefusals bounds the refusals listed (default
	// DefaultMaxRefusals); one more Refusal counts those left out.
	MaxRefusals int
}

// Defaults of Limits.
const (
	DefaultMaxFiles      = 100
	DefaultMaxFileBytes  = 64 << 20
	DefaultMaxTotalBytes = 256 << 20
	DefaultMaxVisit      = 100_000
	DefaultMaxRefusals   = 100
)

// MaxDepth is how deep Collect walks: directories nested deeper are
// refused, so the walk holds at most MaxDepth descriptors open.
const MaxDepth = 64

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if l.MaxVisit <= 0 {
		l.MaxVisit = DefaultMaxVisit
	}
	if l.MaxRefusals <= 0 {
		l.MaxRefusals = DefaultMaxRefusals
	}
	return l
}

// File is a collected file: its path under the root (valid for CheckPath),
// its size and its permission bits.
type File struct {
	Path string
	Size int64
	Mode uint32
}

// Refusal is a path a pattern reached that was not collected, and why.
// Path is Printable: never raw control characters or invalid UTF-8.
type Refusal struct {
	Path, Reason string
}

// Stats count what a Collect did: the files collected (not those that
// changed while read), their bytes, and the directory entries visited.
type Stats struct {
	Files   int
	Bytes   int64
	Visited int
}

// Collect walks the root in lexical order for the regular files that match
// one of patterns (Match; a pattern that fails CheckPattern is refused),
// skipping ".paddock" at the top, and calls emit for each with a reader of
// its bytes. Only directories below which a pattern can still match are
// walked, and a directory in which every pattern needs a literal name is
// not listed: those names are looked up.
//
// Refused, each with a Refusal: symlinks (never followed), files that are
// not regular, names that are not valid UTF-8 or hold control characters,
// paths over MaxPathBytes, directories deeper than MaxDepth or unreadable,
// files over lim.MaxFileBytes, files past lim.MaxFiles or
// lim.MaxTotalBytes; after lim.MaxVisit entries the walk stops, with one
// Refusal naming the cap. A symlink or a special file is refused only when
// a pattern names it (not when it is just passed over by a "**").
//
// The reader given to emit yields at most the size fstat gave when the file
// was opened (O_NOFOLLOW|O_NONBLOCK, fstat'ed: nothing but a regular file
// is read); its last Read returns a *PathError wrapping ErrChanged instead
// of io.EOF if the file is longer, shorter, or rewritten by then. The file
// is then refused "changed while collected", and the caller must drop the
// bytes it got. emit should read to the end; what it leaves, Collect reads
// and discards to judge the file. If emit returns the reader's error (or an
// error wrapping it), Collect records the refusal and goes on; any other
// error stops Collect and is returned.
func (r *Root) Collect(patterns []string, lim Limits, emit func(File, io.Reader) error) ([]Refusal, Stats, error) {
	w := &walker{lim: lim.withDefaults(), emit: emit}
	for _, p := range patterns {
		if err := CheckPattern(p); err != nil {
			w.refuse(p, "invalid pattern: "+err.Error())
			continue
		}
		w.pats = append(w.pats, splitPattern(p))
	}
	if len(w.pats) == 0 {
		return w.refusals(), w.st, nil
	}
	fd, err := r.fresh()
	if err != nil {
		return w.refusals(), w.st, &PathError{Path: r.dir, Reason: "cannot open the workspace: " + errnoReason(err), Err: err}
	}
	defer closeFd(fd)
	err = w.walkDir(fd, "", w.start(), 0)
	return w.refusals(), w.st, err
}

// walker is the state of one Collect.
type walker struct {
	lim  Limits
	emit func(File, io.Reader) error
	pats []pattern

	st      Stats
	refused []Refusal
	more    int      // refusals past lim.MaxRefusals
	stopped *Refusal // the visit cap was reached here
}

// states holds, per pattern, the automaton states after the path so far.
type states [][]int

func (w *walker) start() states {
	s := make(states, len(w.pats))
	for i, p := range w.pats {
		s[i] = p.start()
	}
	return s
}

// step consumes one element: file tells whether a pattern matches the path
// in full, below whether something under it can still match, named whether
// a pattern element other than "**" matched the element itself.
func (w *walker) step(s states, elem string) (next states, file, below, named bool) {
	next = make(states, len(s))
	for i, p := range w.pats {
		var nm bool
		next[i], nm = p.step(s[i], elem)
		file = file || p.accepts(next[i])
		below = below || p.alive(next[i])
		named = named || nm
	}
	return next, file, below, named
}

// refuse records a refusal of rel, or counts it past the cap.
func (w *walker) refuse(rel, reason string) {
	if len(w.refused) >= w.lim.MaxRefusals {
		w.more++
		return
	}
	w.refused = append(w.refused, Refusal{Path: Printable(rel), Reason: reason})
}

// refusals lists the refusals in the order met, then the count of those
// left out, then where the visit cap stopped the walk.
func (w *walker) refusals() []Refusal {
	out := w.refused
	if w.more > 0 {
		out = append(out, Refusal{Path: "", Reason: fmt.Sprintf("%d more paths refused; not listed past the cap of %d refusals", w.more, w.lim.MaxRefusals)})
	}
	if w.stopped != nil {
		out = append(out, *w.stopped)
	}
	return out
}

// stop notes that the visit cap was reached while reading dir.
func (w *walker) stop(dir string) {
	if w.stopped == nil {
		w.stopped = &Refusal{Path: Printable(dir), Reason: fmt.Sprintf("stopped after visiting %d directory entries, the cap; the rest of the workspace was not looked at", w.lim.MaxVisit)}
	}
}

// walkDir visits the entries of the directory fd, at rel, reached with s.
func (w *walker) walkDir(fd int, rel string, s states, depth int) error {
	ents, err := w.entries(fd, rel, s)
	if err != nil {
		w.refuse(rel, "cannot read the directory: "+errnoReason(err))
	}
	for _, e := range ents {
		if err := w.entry(fd, rel, e, s, depth); err != nil {
			return err
		}
	}
	return nil
}

// entries returns the entries of fd that may matter, in lexical order:
// those named, when every pattern needs a literal name here, else all (up
// to the visit cap). Every one counts as visited.
func (w *walker) entries(fd int, rel string, s states) ([]dirent, error) {
	if w.stopped != nil {
		return nil, nil
	}
	if names, ok := w.literals(s); ok {
		return w.lookup(fd, rel, names), nil
	}
	ents, more, err := readDirents(fd, w.lim.MaxVisit-w.st.Visited)
	w.st.Visited += len(ents)
	if more {
		w.stop(rel)
	}
	slices.SortFunc(ents, func(a, b dirent) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return ents, err
}

// literals returns the sorted names the patterns need next, if all of them
// are literal.
func (w *walker) literals(s states) ([]string, bool) {
	var names []string
	for i, p := range w.pats {
		var ok bool
		if names, ok = p.literals(s[i], names); !ok {
			return nil, false
		}
	}
	slices.Sort(names)
	return slices.Compact(names), true
}

// lookup stats each of names in fd; those that exist are its entries.
func (w *walker) lookup(fd int, rel string, names []string) []dirent {
	var ents []dirent
	for _, name := range names {
		if w.st.Visited >= w.lim.MaxVisit {
			w.stop(rel)
			break
		}
		w.st.Visited++
		var st syscall.Stat_t
		if err := lstatAt(fd, name, &st); err != nil {
			if err != syscall.ENOENT {
				w.refuse(join(rel, name), errnoReason(err))
			}
			continue
		}
		ents = append(ents, dirent{name: name, typ: direntType(st.Mode)})
	}
	return ents
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// entry handles one entry e of the directory fd at rel.
func (w *walker) entry(fd int, rel string, e dirent, s states, depth int) error {
	if rel == "" && e.name == ".paddock" {
		return nil
	}
	next, file, below, named := w.step(s, e.name)
	if !file && !below {
		return nil
	}
	typ := e.typ
	if typ == syscall.DT_UNKNOWN {
		var st syscall.Stat_t
		if lstatAt(fd, e.name, &st) != nil {
			return nil // gone
		}
		typ = direntType(st.Mode)
	}
	if !file && !named && !(below && typ == syscall.DT_DIR) {
		return nil // passed over by a "**": not worth a refusal
	}
	p := join(rel, e.name)
	switch reason := nameProblem(e.name); {
	case reason != "":
		w.refuse(p, reason)
	case len(p) > MaxPathBytes:
		w.refuse(p, fmt.Sprintf("path is %d bytes; at most %d allowed", len(p), MaxPathBytes))
	case typ == syscall.DT_DIR && below:
		return w.descend(fd, e.name, p, next, depth+1)
	case typ == syscall.DT_DIR:
		w.refuse(p, "is a directory, not a regular file (a pattern such as \"dir/**\" collects what is in one)")
	case typ == syscall.DT_LNK:
		w.refuse(p, "symlink; not followed")
	case !file: // a name on the way to a match, not a directory
	case typ != syscall.DT_REG:
		w.refuse(p, "not a regular file ("+typeName(typ)+")")
	default:
		return w.collect(fd, e.name, p)
	}
	return nil
}

// descend walks the directory name in fd, at p.
func (w *walker) descend(fd int, name, p string, s states, depth int) error {
	if w.stopped != nil {
		return nil
	}
	if depth > MaxDepth {
		w.refuse(p, fmt.Sprintf("nested deeper than %d directories; not walked", MaxDepth))
		return nil
	}
	child, err := openDir(fd, name)
	if err != nil {
		w.refuse(p, openReason(err)+"; not walked")
		return nil
	}
	defer closeFd(child)
	return w.walkDir(child, p, s, depth)
}

// openReason words the failure to open an entry that was a regular file
// or a directory when it was listed.
func openReason(err error) string {
	switch err {
	case syscall.ELOOP:
		return "symlink; not followed"
	case syscall.ENOTDIR:
		return "not a directory any more (changed while collected)"
	case syscall.ENOENT:
		return "vanished while collected"
	}
	return "cannot open: " + errnoReason(err)
}

// collect opens the regular file name in fd, at p, checks it against the
// caps and hands it to emit.
func (w *walker) collect(fd int, name, p string) error {
	if w.st.Files >= w.lim.MaxFiles {
		w.refuse(p, fmt.Sprintf("over the cap of %d files", w.lim.MaxFiles))
		return nil
	}
	ffd, err := retry(func() (int, error) { return syscall.Openat(fd, name, readFlags, 0) })
	if err != nil {
		w.refuse(p, openReason(err))
		return nil
	}
	defer closeFd(ffd)
	rd := &fileReader{fd: ffd, path: p}
	if err := syscall.Fstat(ffd, &rd.st0); err != nil {
		w.refuse(p, "fstat failed: "+errnoReason(err))
		return nil
	}
	size := rd.st0.Size
	switch {
	case rd.st0.Mode&syscall.S_IFMT != syscall.S_IFREG:
		w.refuse(p, "not a regular file ("+kind(rd.st0.Mode)+")")
		return nil
	case size > w.lim.MaxFileBytes:
		w.refuse(p, fmt.Sprintf("is %d bytes; the cap is %d", size, w.lim.MaxFileBytes))
		return nil
	case w.st.Bytes+size > w.lim.MaxTotalBytes:
		w.refuse(p, fmt.Sprintf("is %d bytes, over the cap of %d bytes in all (%d collected before it)", size, w.lim.MaxTotalBytes, w.st.Bytes))
		return nil
	}
	rd.left = size
	err = w.emit(File{Path: p, Size: size, Mode: rd.st0.Mode & 0o777}, rd)
	if err != nil && (rd.err == nil || rd.err == io.EOF || !errors.Is(err, rd.err)) {
		return err
	}
	if end := rd.finish(); end != io.EOF {
		var pe *PathError
		reason := end.Error()
		if errors.As(end, &pe) {
			reason = pe.Reason
		}
		w.refuse(p, reason)
		return nil
	}
	w.st.Files++
	w.st.Bytes += size
	return nil
}
