package boxfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/paddockhq/paddock/sandbox/boxfs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	bigOnce.cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// collected is what one Collect gave.
type collected struct {
	files   map[string][]byte
	order   []string
	modes   map[string]uint32
	refused []boxfs.Refusal
	st      boxfs.Stats
}

// reason returns the reason p was refused, or "".
func (c collected) reason(p string) string {
	for _, r := range c.refused {
		if r.Path == p {
			return r.Reason
		}
	}
	return ""
}

// collect runs Collect with an emit that reads every file whole and drops
// those the reader says changed.
func collect(t *testing.T, root string, patterns []string, lim boxfs.Limits) collected {
	t.Helper()
	r, err := boxfs.Open(root)
	require.NoError(t, err)
	defer r.Close()
	c := collected{files: map[string][]byte{}, modes: map[string]uint32{}}
	c.refused, c.st, err = r.Collect(patterns, lim, func(f boxfs.File, rd io.Reader) error {
		require.NoError(t, boxfs.CheckPath(f.Path), "an emitted path is one a job may name")
		b, err := io.ReadAll(rd)
		if err != nil {
			require.ErrorIs(t, err, boxfs.ErrChanged, f.Path)
			return err
		}
		require.EqualValues(t, f.Size, len(b), f.Path)
		c.files[f.Path], c.modes[f.Path] = b, f.Mode
		c.order = append(c.order, f.Path)
		return nil
	})
	require.NoError(t, err)
	return c
}

// within fails the test if f does not return within d: the way to see a
// FIFO opened for a blocking read.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("blocked for more than %s", d)
	}
}

// writeFile writes a file under dir, making its parents.
func writeFile(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

var errStop = errors.New("stop")
