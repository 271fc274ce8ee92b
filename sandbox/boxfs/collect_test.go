package boxfs_test

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/sandbox/boxfs"
)

func TestCollectBasics(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeFile(t, s.root, "report.html", "<html>")
	writeFile(t, s.root, "b.html", "b")
	writeFile(t, s.root, "notes.txt", "no")
	writeFile(t, s.root, "out/x/y/deep.html", "deep")
	writeFile(t, s.root, "out/z.log", "log")
	writeFile(t, s.root, ".paddock/spill.html", "spill")
	require.NoError(t, os.Chmod(filepath.Join(s.root, "b.html"), 0o600))

	c := collect(t, s.root, []string{"*.html", "out/**/*.html", "out/*.log"}, boxfs.Limits{})
	assert.Equal(t, []string{"b.html", "out/x/y/deep.html", "out/z.log", "report.html"}, c.order, "lexical order")
	assert.Equal(t, "deep", string(c.files["out/x/y/deep.html"]))
	assert.Equal(t, uint32(0o600), c.modes["b.html"])
	assert.Empty(t, c.refused)
	assert.Equal(t, 4, c.st.Files)
	assert.EqualValues(t, len("<html>b")+len("deep")+len("log"), c.st.Bytes)

	c = collect(t, s.root, []string{"**"}, boxfs.Limits{})
	assert.NotContains(t, c.files, ".paddock/spill.html", ".paddock is skipped")
	assert.Len(t, c.files, 5)

	c = collect(t, s.root, []string{"out", "../x", "/etc/passwd"}, boxfs.Limits{})
	assert.Contains(t, c.reason("out"), "is a directory")
	assert.Contains(t, c.reason("../x"), "invalid pattern")
	assert.Contains(t, c.reason("/etc/passwd"), "invalid pattern")
	assert.Empty(t, c.files)
}

// Symlinks to the box's secrets are refused and never read.
func TestCollectSymlinks(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for name, target := range map[string]string{
		"passwd.txt": "/etc/passwd", "environ.txt": "/proc/1/environ", "self.txt": "/proc/self/environ",
		"secret.txt": s.secret, "dangling.txt": "/nonexistent",
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(s.root, name)))
	}
	require.NoError(t, os.Symlink("/etc", filepath.Join(s.root, "out")))
	require.NoError(t, os.Symlink(s.outside, filepath.Join(s.root, "esc")))
	writeFile(t, s.root, "real/ok.txt", "ok")
	require.NoError(t, os.Symlink("/etc", filepath.Join(s.root, "real/etc")))

	c := collect(t, s.root, []string{"*.txt", "out/passwd", "out/*", "esc/*.txt", "**/passwd"}, boxfs.Limits{})
	assert.Empty(t, c.files)
	for _, p := range []string{"passwd.txt", "environ.txt", "self.txt", "secret.txt", "dangling.txt", "out", "esc"} {
		assert.Equal(t, "symlink; not followed", c.reason(p), p)
	}

	// "**" passes over symlinked directories without following them, and
	// without a refusal for each one.
	c = collect(t, s.root, []string{"**/*.txt"}, boxfs.Limits{})
	assert.Equal(t, []string{"real/ok.txt"}, c.order)
	assert.Equal(t, "symlink; not followed", c.reason("passwd.txt"))
	assert.Empty(t, c.reason("real/etc"))
}

// FIFOs, device nodes and sockets are refused, and a FIFO never blocks.
func TestCollectSpecialFiles(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(s.root, "fifo.log"), 0o666))
	require.NoError(t, syscall.Mkfifo(filepath.Join(s.root, "fifo2.log"), 0o666))
	// A writer holds fifo2 open: a blocking open for reading would now
	// succeed and its reads would wait for data.
	wfd, err := syscall.Open(filepath.Join(s.root, "fifo2.log"), syscall.O_RDWR, 0)
	require.NoError(t, err)
	defer syscall.Close(wfd)
	l, err := net.Listen("unix", filepath.Join(s.root, "sock.log"))
	require.NoError(t, err)
	defer l.Close()
	want := map[string]string{"fifo.log": "not a regular file (fifo)", "fifo2.log": "not a regular file (fifo)", "sock.log": "not a regular file (socket)"}
	if os.Geteuid() == 0 {
		require.NoError(t, syscall.Mknod(filepath.Join(s.root, "null.log"), syscall.S_IFCHR|0o666, 1<<8|3))
		want["null.log"] = "not a regular file (character device)"
	} else {
		t.Log("not root: no device node")
	}
	writeFile(t, s.root, "real.log", "real")

	var c collected
	within(t, 5*time.Second, func() { c = collect(t, s.root, []string{"*.log"}, boxfs.Limits{}) })
	assert.Equal(t, []string{"real.log"}, c.order)
	for p, reason := range want {
		assert.Equal(t, reason, c.reason(p), p)
	}
}

func TestCollectCaps(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeFile(t, s.root, "a.bin", strings.Repeat("a", 100))
	writeFile(t, s.root, "b.bin", strings.Repeat("b", 1001))
	writeFile(t, s.root, "c.bin", strings.Repeat("c", 900))
	writeFile(t, s.root, "d.bin", strings.Repeat("d", 50))
	writeFile(t, s.root, "e.bin", strings.Repeat("e", 10))

	c := collect(t, s.root, []string{"*.bin"}, boxfs.Limits{MaxFileBytes: 1000, MaxTotalBytes: 960})
	assert.Equal(t, []string{"a.bin", "d.bin", "e.bin"}, c.order)
	assert.Equal(t, "is 1001 bytes; the cap is 1000", c.reason("b.bin"))
	assert.Contains(t, c.reason("c.bin"), "over the cap of 960 bytes in all")

	c = collect(t, s.root, []string{"*.bin"}, boxfs.Limits{MaxFiles: 2})
	assert.Equal(t, []string{"a.bin", "b.bin"}, c.order)
	assert.Equal(t, "over the cap of 2 files", c.reason("c.bin"))
	assert.Equal(t, "over the cap of 2 files", c.reason("e.bin"))
	assert.Equal(t, 2, c.st.Files)
}

// Names with a newline or invalid UTF-8 are refused, and printed escaped.
func TestCollectBadNames(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for _, n := range []string{"evil\nname.txt", "bad\xffutf8.txt", "tab\there.txt", "dir\x1b[31m"} {
		if strings.HasPrefix(n, "dir") {
			writeFile(t, s.root, n+"/in.txt", "x")
		} else {
			writeFile(t, s.root, n, "x")
		}
	}
	writeFile(t, s.root, "fine.txt", "x")
	c := collect(t, s.root, []string{"*.txt", "**/in.txt"}, boxfs.Limits{})
	assert.Equal(t, []string{"fine.txt"}, c.order)
	assert.Equal(t, "name contains a control character (such as a newline)", c.reason(`"evil\nname.txt"`))
	assert.Equal(t, "name is not valid UTF-8", c.reason(`"bad\xffutf8.txt"`))
	assert.Equal(t, "name contains a control character (such as a newline)", c.reason(`"dir\x1b[31m"`))
	for _, r := range c.refused {
		assert.True(t, utf8.ValidString(r.Path) && !strings.ContainsFunc(r.Path, unicode.IsControl), "raw path %q", r.Path)
		_, err := strconv.Unquote(r.Path)
		assert.NoError(t, err, "an escaped path is a Go string literal: %s", r.Path)
	}
}

// A file that grows, shrinks or is rewritten while it is read is refused,
// and the reader says so instead of io.EOF.
func TestCollectChangedWhileRead(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	grow := writeFile(t, s.root, "grow.log", strings.Repeat("g", 64<<10))
	shrink := writeFile(t, s.root, "shrink.log", strings.Repeat("s", 64<<10))
	rewrite := writeFile(t, s.root, "rewrite.log", strings.Repeat("r", 64<<10))
	writeFile(t, s.root, "still.log", "still")

	r, err := boxfs.Open(s.root)
	require.NoError(t, err)
	defer r.Close()
	var got []string
	refused, st, err := r.Collect([]string{"*.log"}, boxfs.Limits{}, func(f boxfs.File, rd io.Reader) error {
		buf := make([]byte, 4096)
		n, err := rd.Read(buf)
		require.NoError(t, err)
		require.Positive(t, n)
		switch f.Path { // the job changes the file under the reader
		case "grow.log":
			appendTo(t, grow, "more")
		case "shrink.log":
			require.NoError(t, os.Truncate(shrink, 100))
		case "rewrite.log":
			require.NoError(t, os.WriteFile(rewrite, []byte(strings.Repeat("R", 64<<10)), 0o644))
			require.NoError(t, os.Chtimes(rewrite, time.Now(), time.Now().Add(time.Hour)))
		}
		_, err = io.Copy(io.Discard, rd)
		if f.Path == "still.log" {
			require.NoError(t, err)
			got = append(got, f.Path)
			return nil
		}
		require.ErrorIs(t, err, boxfs.ErrChanged, f.Path)
		return err // the reader's own error: Collect goes on
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"still.log"}, got)
	assert.ElementsMatch(t, []boxfs.Refusal{
		{Path: "grow.log", Reason: "changed while collected"},
		{Path: "rewrite.log", Reason: "changed while collected"},
		{Path: "shrink.log", Reason: "changed while collected"},
	}, refused)
	assert.Equal(t, 1, st.Files)
	assert.EqualValues(t, 5, st.Bytes)
}

// A file growing all the time, by a writer of its own, while emit reads
// it: the writer appends a line after each read of emit's, and emit reads
// on only once it has, so the file grows under every read.
func TestCollectGrowingFile(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	p := writeFile(t, s.root, "live.log", strings.Repeat("x", 1<<16))
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	read, wrote := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range read {
			_, err := f.WriteString("line\n")
			assert.NoError(t, err)
			wrote <- struct{}{}
		}
	}()
	var emitErr error
	refused, st, err := s.r.Collect([]string{"live.log"}, boxfs.Limits{}, func(f boxfs.File, rd io.Reader) error {
		_, emitErr = io.Copy(io.Discard, lockstep{rd, read, wrote})
		return emitErr
	})
	close(read)
	<-done
	require.NoError(t, err)
	assert.ErrorIs(t, emitErr, boxfs.ErrChanged)
	assert.Equal(t, []boxfs.Refusal{{Path: "live.log", Reason: "changed while collected"}}, refused)
	assert.Zero(t, st.Files)
}

// lockstep reads in small steps and, after each, has the writer append
// (read) and waits until it has (wrote).
type lockstep struct {
	r           io.Reader
	read, wrote chan struct{}
}

func (s lockstep) Read(p []byte) (int, error) {
	n, err := s.r.Read(p[:min(len(p), 1024)])
	s.read <- struct{}{}
	<-s.wrote
	return n, err
}

func appendTo(t *testing.T, p, s string) {
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func TestCollectEmit(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeFile(t, s.root, "a.txt", "aaaa")
	writeFile(t, s.root, "b.txt", "bbbb")
	r, err := boxfs.Open(s.root)
	require.NoError(t, err)
	defer r.Close()

	// Another error stops the walk and is returned.
	var seen []string
	_, _, err = r.Collect([]string{"*.txt"}, boxfs.Limits{}, func(f boxfs.File, _ io.Reader) error {
		seen = append(seen, f.Path)
		return errStop
	})
	assert.ErrorIs(t, err, errStop)
	assert.Equal(t, []string{"a.txt"}, seen)

	// An emit that reads nothing: Collect judges the file itself.
	refused, st, err := r.Collect([]string{"*.txt"}, boxfs.Limits{}, func(boxfs.File, io.Reader) error { return nil })
	require.NoError(t, err)
	assert.Empty(t, refused)
	assert.Equal(t, boxfs.Stats{Files: 2, Bytes: 8, Visited: 2}, st)

	// The reader never yields more than the size, nor reads past it.
	_, _, err = r.Collect([]string{"a.txt"}, boxfs.Limits{}, func(f boxfs.File, rd io.Reader) error {
		buf := make([]byte, 100)
		n, err := io.ReadFull(rd, buf)
		assert.Equal(t, 4, n)
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		n, err = rd.Read(buf)
		assert.Zero(t, n)
		assert.Equal(t, io.EOF, err)
		return nil
	})
	require.NoError(t, err)
}

func TestCollectTooDeep(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	deep := strings.Repeat("d/", boxfs.MaxDepth+2) + "f.txt"
	writeFile(t, s.root, deep, "x")
	writeFile(t, s.root, strings.Repeat("d/", 3)+"g.txt", "y")
	c := collect(t, s.root, []string{"**/*.txt"}, boxfs.Limits{})
	assert.Equal(t, []string{"d/d/d/g.txt"}, c.order)
	assert.Equal(t, "nested deeper than 64 directories; not walked", c.reason(strings.Repeat("d/", boxfs.MaxDepth)+"d"))
}

// Refusals are bounded: past the cap they are counted in one more.
func TestCollectRefusalCap(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for i := range 30 {
		require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(s.root, "l"+strconv.Itoa(100+i))))
	}
	c := collect(t, s.root, []string{"l*"}, boxfs.Limits{MaxRefusals: 10})
	require.Len(t, c.refused, 11)
	assert.Equal(t, "20 more paths refused; not listed past the cap of 10 refusals", c.refused[10].Reason)
}

// Two collections of one root see the same (the root's descriptor is not
// worn by the first).
func TestCollectTwice(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	writeFile(t, s.root, "a/b.txt", "x")
	r, err := boxfs.Open(s.root)
	require.NoError(t, err)
	defer r.Close()
	for range 3 {
		_, st, err := r.Collect([]string{"**"}, boxfs.Limits{}, func(boxfs.File, io.Reader) error { return nil })
		require.NoError(t, err)
		assert.Equal(t, 1, st.Files)
	}
}
