package boxfs_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/sandbox/boxfs"
)

// setup is a workspace root and a directory outside it standing for the
// rest of the box (/etc, /proc ...), with a secret in it.
type setup struct {
	root, outside, secret string
	r                     *boxfs.Root
}

func newSetup(t *testing.T) setup {
	t.Helper()
	base := t.TempDir()
	s := setup{root: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	require.NoError(t, os.Mkdir(s.root, 0o755))
	s.secret = writeFile(t, s.outside, "secret.txt", "top secret\n")
	r, err := boxfs.Open(s.root)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	s.r = r
	return s
}

// put writes content at rel and returns the *PathError, if any.
func (s setup) put(rel string, mode uint32, content string) *boxfs.PathError {
	err := s.r.WriteFile(rel, mode, int64(len(content)), strings.NewReader(content))
	if err == nil {
		return nil
	}
	var pe *boxfs.PathError
	if !errors.As(err, &pe) {
		panic(err)
	}
	return pe
}

// secretIntact checks nothing outside the root was written.
func (s setup) secretIntact(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(s.secret)
	require.NoError(t, err)
	assert.Equal(t, "top secret\n", string(b), "a file outside the root changed")
	ents, err := os.ReadDir(s.outside)
	require.NoError(t, err)
	assert.Len(t, ents, 1, "a file was created outside the root")
}

// Not parallel: the umask is the process's.
func TestWriteFileExactAndModes(t *testing.T) {
	s := newSetup(t)
	old := syscall.Umask(0o077) // a umask must not change the mode asked for
	defer syscall.Umask(old)
	content := string(bytes.Repeat([]byte{0, 1, 2, 255, '\n'}, 100_001))
	require.Nil(t, s.put("a/b/c.bin", 0o751, content))
	require.Nil(t, s.put("top.txt", 0o400, "x"))
	require.Nil(t, s.put("empty", 0o644, ""))

	b, err := os.ReadFile(filepath.Join(s.root, "a/b/c.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal([]byte(content), b), "not byte-exact")
	for rel, mode := range map[string]os.FileMode{"a/b/c.bin": 0o751, "top.txt": 0o400, "empty": 0o644} {
		st, err := os.Lstat(filepath.Join(s.root, rel))
		require.NoError(t, err)
		assert.Equal(t, mode, st.Mode().Perm(), rel)
		assert.True(t, st.Mode().IsRegular(), rel)
	}
	st, err := os.Stat(filepath.Join(s.root, "a"))
	require.NoError(t, err)
	assert.True(t, st.IsDir())
}

func TestWriteFileTruncatesExisting(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	p := writeFile(t, s.root, "d/f", strings.Repeat("old content ", 100))
	require.NoError(t, os.Chmod(p, 0o600))
	st0, _ := os.Stat(p)
	require.Nil(t, s.put("d/f", 0o644, "new"))
	b, _ := os.ReadFile(p)
	assert.Equal(t, "new", string(b))
	st1, _ := os.Stat(p)
	assert.Equal(t, os.FileMode(0o644), st1.Mode().Perm())
	assert.True(t, os.SameFile(st0, st1), "an existing file of one link is rewritten in place")
}

// A hard link to a file outside the root is replaced, never written
// through.
func TestWriteFileHardLinkReplaced(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	require.NoError(t, os.Link(s.secret, filepath.Join(s.root, "linked")))
	require.Nil(t, s.put("linked", 0o644, "mine"))
	b, _ := os.ReadFile(filepath.Join(s.root, "linked"))
	assert.Equal(t, "mine", string(b))
	s.secretIntact(t)
}

func TestWriteFileRefusals(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	require.NoError(t, os.Symlink("/etc", filepath.Join(s.root, "out")))
	require.NoError(t, os.Symlink(s.outside, filepath.Join(s.root, "esc")))
	require.NoError(t, os.Symlink(s.secret, filepath.Join(s.root, "link.txt")))
	require.NoError(t, os.Symlink(filepath.Join(s.outside, "new.txt"), filepath.Join(s.root, "dangling")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(s.root, "fifo"), 0o644))
	writeFile(t, s.root, "file", "x")
	require.NoError(t, os.MkdirAll(filepath.Join(s.root, "dir/sub"), 0o755))
	hosts, _ := os.ReadFile("/etc/hosts")

	for _, c := range []struct{ rel, reason string }{
		{"out/hosts", `parent "out" is a symlink; not followed`},
		{"esc/secret.txt", `parent "esc" is a symlink; not followed`},
		{"esc/new/deeper.txt", `parent "esc" is a symlink; not followed`},
		{"link.txt", "exists and is a symlink; not followed"},
		{"dangling", "exists and is a symlink; not followed"},
		{"fifo", "exists and is a fifo, not a regular file"},
		{"dir", "exists and is a directory, not a regular file"},
		{"file/x", `parent "file" is a regular file, not a directory`},
		{"fifo/x", `parent "fifo" is a fifo, not a directory`},
		{"../x", "must not contain '..'"},
		{"/etc/passwd", "must be relative"},
		{"a\nb", "control character"},
		{".paddock/x", "under .paddock/"},
		{"a//b", "empty or '.' element"},
	} {
		var pe *boxfs.PathError
		within(t, 2*time.Second, func() { pe = s.put(c.rel, 0o644, "evil") })
		if assert.NotNil(t, pe, c.rel) {
			assert.Contains(t, pe.Reason, c.reason, c.rel)
			assert.Equal(t, c.rel, pe.Path)
		}
	}
	s.secretIntact(t)
	after, _ := os.ReadFile("/etc/hosts")
	assert.Equal(t, hosts, after)
	assert.NoFileExists(t, filepath.Join(s.outside, "new.txt"))
	assert.NoDirExists(t, filepath.Join(s.outside, "new"))
}

// A FIFO with a reader waiting on it: an open for writing would succeed
// (and write into the pipe); the file is refused before any open.
func TestWriteFileFIFOWithReader(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	fifo := filepath.Join(s.root, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o666))
	rfd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer syscall.Close(rfd)
	var pe *boxfs.PathError
	within(t, 2*time.Second, func() { pe = s.put("fifo", 0o644, "into the pipe") })
	require.NotNil(t, pe)
	assert.Contains(t, pe.Reason, "fifo")
	buf := make([]byte, 64)
	n, _ := syscall.Read(rfd, buf)
	assert.LessOrEqual(t, n, 0, "bytes went into the FIFO")
}

func TestWriteFileBadModeAndSize(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for _, m := range []uint32{0, 0o200, 0o1777, 0o4755, 0o2644, 0o10644} {
		pe := s.put("m", m, "x")
		require.NotNil(t, pe, "%#o", m)
		assert.Contains(t, pe.Reason, "out of range")
	}
	assert.NoFileExists(t, filepath.Join(s.root, "m"))
	assert.Error(t, s.r.WriteFile("neg", 0o644, -1, strings.NewReader("")))
}

// countingReader counts the bytes it was asked for.
type countingReader struct {
	r    io.Reader
	read int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	return n, err
}

func TestWriteFileReadsExactlySize(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	src := &countingReader{r: strings.NewReader(strings.Repeat("z", 1<<20))}
	require.NoError(t, s.r.WriteFile("part", 0o644, 12345, src))
	assert.EqualValues(t, 12345, src.read, "read past size")
	st, err := os.Stat(filepath.Join(s.root, "part"))
	require.NoError(t, err)
	assert.EqualValues(t, 12345, st.Size())

	// A source that ends early: an error, and no half file left.
	err = s.r.WriteFile("short", 0o644, 100, strings.NewReader("only 12 byt"))
	var pe *boxfs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Reason, "ended after 11 of 100 bytes")
	assert.NoFileExists(t, filepath.Join(s.root, "short"))

	// A source that fails.
	err = s.r.WriteFile("failing", 0o644, 100, io.MultiReader(strings.NewReader("ab"), iotestErr{}))
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Reason, "reading the input")
	assert.NoFileExists(t, filepath.Join(s.root, "failing"))
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("source broke") }

// A full file system is reported as such. Needs a tmpfs of its own
// (mounting needs CAP_SYS_ADMIN; the tests run as root here).
func TestWriteFileENOSPC(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	r, err := boxfs.Open(dir)
	require.NoError(t, err)
	defer r.Close()
	err = r.WriteFile("big", 0o644, 1<<20, bytes.NewReader(make([]byte, 1<<20)))
	var pe *boxfs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "workspace full (ENOSPC)", pe.Reason)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	assert.NoFileExists(t, filepath.Join(dir, "big"), "the partial file is removed")
}

func TestOpen(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	link := filepath.Join(filepath.Dir(s.root), "wslink")
	require.NoError(t, os.Symlink(s.root, link))
	_, err := boxfs.Open(link)
	var pe *boxfs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "is a symlink; not followed", pe.Reason)

	_, err = boxfs.Open(s.secret)
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "is a regular file, not a directory", pe.Reason)

	_, err = boxfs.Open(filepath.Join(s.root, "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
