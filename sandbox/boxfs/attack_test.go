package boxfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/sandbox/boxfs"
)

const bigN = 100_000

// bigFixture is a workspace with report.html next to big/, a directory of
// 100,000 tiny files; made once (it takes a few seconds), removed by
// TestMain.
type bigFixture struct {
	once sync.Once
	dir  string
	err  error
}

var bigOnce bigFixture

func (b *bigFixture) get(t *testing.T) string {
	t.Helper()
	b.once.Do(func() { b.dir, b.err = makeBig() })
	require.NoError(t, b.err)
	return b.dir
}

// makeBig makes the fixture, on a tmpfs when there is one (/dev/shm): on
// a disk, 100,000 creations take a minute under the race detector.
func makeBig() (string, error) {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2) == nil {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "boxfs-big-")
	if err != nil {
		return "", err
	}
	big := filepath.Join(dir, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		return dir, err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.html"), []byte("<html>"), 0o644); err != nil {
		return dir, err
	}
	dfd, err := syscall.Open(big, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return dir, err
	}
	defer syscall.Close(dfd)
	for i := range bigN {
		fd, err := syscall.Openat(dfd, fmt.Sprintf("f%06d", i), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL, 0o644)
		if err != nil {
			return dir, err
		}
		_, err = syscall.Write(fd, []byte("x"))
		syscall.Close(fd)
		if err != nil {
			return dir, err
		}
	}
	return dir, nil
}

func (b *bigFixture) cleanup() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// 100,000 files matched, a cap of 100 files and 1,000 visits: bounded
// files, refusals and work.
func TestCollectManyFilesBounded(t *testing.T) {
	t.Parallel()
	dir := bigOnce.get(t)
	var c collected
	start := time.Now()
	within(t, 30*time.Second, func() {
		c = collect(t, dir, []string{"big/*"}, boxfs.Limits{MaxFiles: 100, MaxVisit: 1000})
	})
	t.Logf("took %s", time.Since(start))
	assert.Len(t, c.files, 100)
	assert.Equal(t, 1000, c.st.Visited)
	assert.LessOrEqual(t, len(c.refused), boxfs.DefaultMaxRefusals+2)
	last := c.refused[len(c.refused)-1]
	assert.Equal(t, "big", last.Path)
	assert.Equal(t, "stopped after visiting 1000 directory entries, the cap; the rest of the workspace was not looked at", last.Reason)
	assert.Equal(t, "over the cap of 100 files", c.refused[0].Reason)

	// Without a visit cap of its own, the default one still ends it.
	c = collect(t, dir, []string{"**"}, boxfs.Limits{MaxFiles: 10, MaxVisit: bigN / 2})
	assert.Len(t, c.files, 10)
	assert.Equal(t, bigN/2, c.st.Visited)
}

// A pattern that cannot match in big/ never lists it; a literal pattern
// does not even list the root.
func TestCollectPrunes(t *testing.T) {
	t.Parallel()
	dir := bigOnce.get(t)
	c := collect(t, dir, []string{"report.html"}, boxfs.Limits{MaxVisit: 10})
	assert.Equal(t, []string{"report.html"}, c.order)
	assert.Equal(t, 1, c.st.Visited, "looked up by name")

	c = collect(t, dir, []string{"*.html", "other/**"}, boxfs.Limits{MaxVisit: 10})
	assert.Equal(t, []string{"report.html"}, c.order)
	assert.Equal(t, 2, c.st.Visited, "the root listed, big/ not entered")
	assert.Empty(t, c.refused)

	// In a root of 100,000 entries, a literal name is found at once,
	// whatever the visit cap.
	c = collect(t, filepath.Join(dir, "big"), []string{"f099999", "nope", "a/b/c"}, boxfs.Limits{MaxVisit: 5})
	assert.Equal(t, []string{"f099999"}, c.order)
	assert.Equal(t, 3, c.st.Visited)
}

// The job swaps a directory for a symlink to outside, over and over, while
// files are written and collected: nothing outside is ever read or
// written.
func TestSwappedDirectoryRace(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	out := filepath.Join(s.root, "out")
	real := filepath.Join(s.root, "real")
	writeFile(t, real, "secret.txt", "mine")
	swap := filepath.Join(s.root, "swap")
	require.NoError(t, os.Symlink(s.outside, swap))
	require.NoError(t, os.Rename(real, out))

	var swaps atomic.Int64
	stop := swapper(t, func(int) {
		// out is alternately the real directory and the symlink.
		if renameExchange(out, swap) == nil {
			swaps.Add(1)
		}
	})
	deadline := time.Now().Add(300 * time.Millisecond)
	var collected, written int
	for time.Now().Before(deadline) {
		c := collect(t, s.root, []string{"out/*.txt"}, boxfs.Limits{})
		for p, b := range c.files {
			require.NotEqual(t, "top secret\n", string(b), "read %s through the symlink", p)
			collected++
		}
		if s.r.WriteFile("out/new.txt", 0o644, 4, strings.NewReader("evil")) == nil {
			written++
		}
		s.r.WriteFile("out/secret.txt", 0o644, 4, strings.NewReader("evil"))
	}
	stop()
	s.secretIntact(t)
	require.Positive(t, swaps.Load(), "the swapper never swapped")
	t.Logf("collected %d, written %d while racing %d swaps", collected, written, swaps.Load())
}

// The job swaps a file for a symlink, a FIFO and back while it is
// collected: a FIFO is never read in a blocking way, a symlink never
// followed.
func TestSwappedFileRace(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	target := filepath.Join(s.root, "a.txt")
	alt := []string{filepath.Join(s.root, "alt-link"), filepath.Join(s.root, "alt-fifo"), filepath.Join(s.root, "alt-file")}
	writeFile(t, s.root, "a.txt", "real")
	require.NoError(t, os.Symlink(s.secret, alt[0]))
	require.NoError(t, syscall.Mkfifo(alt[1], 0o666))
	writeFile(t, s.root, "alt-file", "also real")

	var swaps atomic.Int64
	stop := swapper(t, func(i int) {
		if renameExchange(target, alt[i%3]) == nil {
			swaps.Add(1)
		}
	})
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		within(t, 5*time.Second, func() {
			c := collect(t, s.root, []string{"a.txt"}, boxfs.Limits{})
			for _, b := range c.files {
				require.NotEqual(t, "top secret\n", string(b))
			}
		})
	}
	stop()
	require.Positive(t, swaps.Load(), "the swapper never swapped")
}

// swapper runs f(0), f(1) ... in a goroutine until the returned stop.
func swapper(t *testing.T, f func(int)) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !done.Load(); i++ {
			f(i)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { done.Store(true); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// renameExchange swaps two names atomically (renameat2 RENAME_EXCHANGE),
// as a job would to win a race.
func renameExchange(a, b string) error {
	nr, ok := map[string]uintptr{"amd64": 316, "arm64": 276, "riscv64": 276}[runtime.GOARCH]
	if !ok {
		return syscall.ENOSYS
	}
	pa, _ := syscall.BytePtrFromString(a)
	pb, _ := syscall.BytePtrFromString(b)
	const atFdcwd, exchange = -100, 2
	fd := atFdcwd
	_, _, e := syscall.Syscall6(nr, uintptr(fd), uintptr(unsafe.Pointer(pa)), uintptr(fd), uintptr(unsafe.Pointer(pb)), exchange, 0)
	if e != 0 {
		return e
	}
	return nil
}
