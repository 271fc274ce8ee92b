package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

// box drives init's handlers as the worker would: frames in on a channel
// (what readFrames hands to handle), init's replies out of a real unix
// socketpair standing in for the control connection.
//
// Nothing here may make init call die: outside a container's PID
// namespace, its kill(-1, SIGKILL) would kill every process the test may
// signal. So badFrames panics instead, and the worker's end of the socket
// is read all along and closed only once the handler has returned (a
// failed send would die).
type box struct {
	t    *testing.T
	p    *initProc
	in   chan frame
	ws   string
	mu   sync.Mutex
	got  []frame
	more chan struct{} // a frame arrived
	busy sync.WaitGroup
}

type badFrameError string

func newBox(t *testing.T) *box {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	// A small send buffer: init blocks on a send after a few chunks, as
	// it does when the worker is slow.
	require.NoError(t, syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, 16<<10))
	b := &box{
		t: t, in: make(chan frame), ws: t.TempDir(), more: make(chan struct{}, 1),
		p: &initProc{out: os.NewFile(uintptr(fds[0]), "init"), waiters: map[int]chan syscall.WaitStatus{}},
	}
	peer := os.NewFile(uintptr(fds[1]), "worker")
	oldWS, oldBad := workspaceDir, badFrames
	workspaceDir = b.ws
	badFrames = func(format string, args ...any) { panic(badFrameError(fmt.Sprintf(format, args...))) }
	readDone := make(chan struct{})
	go b.read(peer, readDone)
	t.Cleanup(func() {
		// Never close the socket under a running handler: leak it instead.
		idle := make(chan struct{})
		go func() { b.busy.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-time.After(10 * time.Second):
			t.Error("a handler is still running; its socket is left open")
			return
		}
		b.p.out.Close()
		<-readDone
		peer.Close()
		workspaceDir, badFrames = oldWS, oldBad
	})
	return b
}

// read keeps every frame init sends, never blocking init.
func (b *box) read(peer *os.File, done chan struct{}) {
	defer close(done)
	for {
		typ, payload, err := initproto.ReadFrame(peer, initproto.MaxReply)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.got = append(b.got, frame{typ, payload})
		b.mu.Unlock()
		select {
		case b.more <- struct{}{}:
		default:
		}
	}
}

// handle runs p.handle(f) in the background; the result says whether it
// ended on a protocol error (badFrames), and with which message.
func (b *box) handle(f frame) <-chan string {
	res := make(chan string, 1)
	b.busy.Add(1)
	go func() {
		defer b.busy.Done()
		defer func() {
			msg, _ := recover().(badFrameError)
			res <- string(msg)
		}()
		b.p.handle(f, b.in)
	}()
	return res
}

// next returns init's next frame (waiting up to 5s), consuming it.
func (b *box) next() frame {
	b.t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		b.mu.Lock()
		if len(b.got) > 0 {
			f := b.got[0]
			b.got = b.got[1:]
			b.mu.Unlock()
			return f
		}
		b.mu.Unlock()
		select {
		case <-b.more:
		case <-deadline:
			b.t.Fatal("init sent nothing for 5s")
		}
	}
}

// sent is every frame init sent that was not consumed yet.
func (b *box) sent() []frame {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]frame(nil), b.got...)
}

func jsonFrame(t *testing.T, typ byte, v any) frame {
	p, err := json.Marshal(v)
	require.NoError(t, err)
	return frame{typ, p}
}

func decode[T any](t *testing.T, f frame, typ byte) T {
	t.Helper()
	require.Equal(t, string(typ), string(f.typ), "frame type; payload %q", f.payload)
	var v T
	require.NoError(t, json.Unmarshal(f.payload, &v))
	return v
}

// putFrames sends data in frames of at most chunk bytes.
func (b *box) putFrames(data []byte, chunk int) {
	b.t.Helper()
	for len(data) > 0 {
		n := min(chunk, len(data))
		select {
		case b.in <- frame{initproto.TypeData, data[:n]}:
		case <-time.After(5 * time.Second):
			b.t.Fatalf("init stopped reading data frames with %d bytes to go", len(data))
		}
		data = data[n:]
	}
}

// afterPut checks that the put read none of the frames after its own.
func (b *box) afterPut() {
	b.t.Helper()
	select {
	case b.in <- frame{initproto.TypeProbe, nil}:
		b.t.Fatal("the put read a frame past its data")
	case <-time.After(20 * time.Millisecond):
	}
}

func TestPut(t *testing.T) {
	b := newBox(t)
	data := bytes.Repeat([]byte("paddock\x00\xff\n"), 70_000) // 700 kB, several frames
	done := b.handle(jsonFrame(t, initproto.TypePut, initproto.Put{Path: "in/data.bin", Mode: 0o640, Size: int64(len(data))}))
	b.putFrames(data, initproto.DataChunk)
	assert.Equal(t, initproto.PutDone{}, decode[initproto.PutDone](t, b.next(), initproto.TypePutDone))
	assert.Empty(t, <-done)
	got, err := os.ReadFile(filepath.Join(b.ws, "in/data.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "not byte-exact")
	st, err := os.Stat(filepath.Join(b.ws, "in/data.bin"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	assert.Equal(t, os.Getuid(), int(st.Sys().(*syscall.Stat_t).Uid), "owned by init's user")

	// An empty file has no data frame.
	done = b.handle(jsonFrame(t, initproto.TypePut, initproto.Put{Path: "empty", Mode: 0o644}))
	assert.Equal(t, initproto.PutDone{}, decode[initproto.PutDone](t, b.next(), initproto.TypePutDone))
	assert.Empty(t, <-done)
	b.afterPut()
	assert.FileExists(t, filepath.Join(b.ws, "empty"))
}

// A refused put still reads all its data frames, so the stream stays in
// step, and says why.
func TestPutRefused(t *testing.T) {
	b := newBox(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(b.ws, "out")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(b.ws, "fifo"), 0o666))
	for _, c := range []struct {
		put    initproto.Put
		reason string
	}{
		{initproto.Put{Path: "out/evil.sh", Mode: 0o755}, `parent "out" is a symlink; not followed`},
		{initproto.Put{Path: "fifo", Mode: 0o644}, "exists and is a fifo, not a regular file"},
		{initproto.Put{Path: "../escape", Mode: 0o644}, "must not contain '..'"},
		{initproto.Put{Path: "x", Mode: 0o4755}, "out of range"},
	} {
		data := []byte(strings.Repeat("evil", 100_000))
		c.put.Size = int64(len(data))
		done := b.handle(jsonFrame(t, initproto.TypePut, c.put))
		b.putFrames(data, 64<<10)
		reply := decode[initproto.PutDone](t, b.next(), initproto.TypePutDone)
		assert.Contains(t, reply.Error, c.reason, c.put.Path)
		assert.Empty(t, <-done)
		b.afterPut()
	}
	ents, _ := os.ReadDir(outside)
	assert.Empty(t, ents, "written outside the workspace")
}

func TestPutNoWorkspace(t *testing.T) {
	b := newBox(t)
	workspaceDir = filepath.Join(b.ws, "missing")
	done := b.handle(jsonFrame(t, initproto.TypePut, initproto.Put{Path: "a", Mode: 0o644, Size: 5}))
	b.putFrames([]byte("hello"), 2)
	reply := decode[initproto.PutDone](t, b.next(), initproto.TypePutDone)
	assert.Equal(t, "the workspace cannot be opened: does not exist (ENOENT)", reply.Error)
	assert.Empty(t, <-done)
}

// A frame stream that breaks the protocol ends the box (here: badFrames),
// with no answer.
func TestPutBadFrames(t *testing.T) {
	for name, c := range map[string]struct {
		put    frame
		frames []frame
		msg    string
	}{
		"other frame among data": {
			jsonFrame(t, initproto.TypePut, initproto.Put{Path: "a", Mode: 0o644, Size: 10}),
			[]frame{{initproto.TypeData, []byte("12345")}, {initproto.TypeRun, []byte("{}")}},
			`put: frame 'C' with 5 bytes of data to come`,
		},
		"more data than the size": {
			jsonFrame(t, initproto.TypePut, initproto.Put{Path: "a", Mode: 0o644, Size: 4}),
			[]frame{{initproto.TypeData, []byte("12345")}},
			`put: a data frame of 5 bytes with only 4 to come`,
		},
		"negative size": {jsonFrame(t, initproto.TypePut, initproto.Put{Path: "a", Mode: 0o644, Size: -1}), nil, `put "a": size -1`},
		"bad json":      {frame{initproto.TypePut, []byte("{")}, nil, "bad 'W' request"},
	} {
		t.Run(name, func(t *testing.T) {
			b := newBox(t)
			done := b.handle(c.put)
			for _, f := range c.frames {
				b.in <- f
			}
			assert.Contains(t, <-done, c.msg)
			assert.Empty(t, b.sent(), "no answer to a broken stream")
		})
	}
}

// collectedFrames is a collection as the worker sees it.
type collectedFrames struct {
	files   map[string][]byte
	hdrs    map[string]initproto.FileHdr
	dropped map[string]string // FileEnd.Refused
	refused map[string]string // TypeRefused
	order   []string
	end     initproto.Collected
}

// readCollection reads init's frames up to TypeCollected; onHdr runs on
// each file header before the file's data is read.
func (b *box) readCollection(onHdr func(initproto.FileHdr)) collectedFrames {
	b.t.Helper()
	c := collectedFrames{files: map[string][]byte{}, hdrs: map[string]initproto.FileHdr{}, dropped: map[string]string{}, refused: map[string]string{}}
	var cur string
	for {
		f := b.next()
		require.LessOrEqual(b.t, len(f.payload), initproto.ChunkSize, "frame %q over ChunkSize", f.typ)
		switch f.typ {
		case initproto.TypeFileHdr:
			h := decode[initproto.FileHdr](b.t, f, f.typ)
			cur, c.hdrs[h.Path] = h.Path, h
			c.order = append(c.order, h.Path)
			c.files[cur] = []byte{}
			if onHdr != nil {
				onHdr(h)
			}
		case initproto.TypeFileData:
			require.NotEmpty(b.t, cur, "data outside a file")
			c.files[cur] = append(c.files[cur], f.payload...)
		case initproto.TypeFileEnd:
			if e := decode[initproto.FileEnd](b.t, f, f.typ); e.Refused != "" {
				c.dropped[cur] = e.Refused
			}
			cur = ""
		case initproto.TypeRefused:
			r := decode[initproto.Refusal](b.t, f, f.typ)
			c.refused[r.Path] = r.Reason
		case initproto.TypeCollected:
			require.Empty(b.t, cur, "collection ended inside a file")
			c.end = decode[initproto.Collected](b.t, f, f.typ)
			return c
		default:
			b.t.Fatalf("unexpected frame %q", f.typ)
		}
	}
}

func TestCollect(t *testing.T) {
	b := newBox(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 10_000) // 160 kB: several chunks
	require.NoError(t, os.MkdirAll(filepath.Join(b.ws, "out/sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b.ws, "out/big.bin"), big, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(b.ws, "out/sub/a.txt"), []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(b.ws, "out/empty.txt"), nil, 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(b.ws, "out/passwd")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(b.ws, "out/fifo"), 0o666))
	require.NoError(t, os.WriteFile(filepath.Join(b.ws, "out/bad\nname"), []byte("x"), 0o644))

	done := b.handle(jsonFrame(t, initproto.TypeCollect, initproto.Collect{Patterns: []string{"out/**"}, MaxFiles: 10}))
	c := b.readCollection(nil)
	assert.Empty(t, <-done)
	assert.Equal(t, []string{"out/big.bin", "out/empty.txt", "out/sub/a.txt"}, c.order)
	assert.True(t, bytes.Equal(big, c.files["out/big.bin"]))
	assert.Equal(t, initproto.FileHdr{Path: "out/big.bin", Size: int64(len(big)), Mode: 0o600}, c.hdrs["out/big.bin"])
	assert.Equal(t, []byte{}, c.files["out/empty.txt"])
	assert.Empty(t, c.dropped)
	assert.Equal(t, map[string]string{
		"out/passwd":      "symlink; not followed",
		"out/fifo":        "not a regular file (fifo)",
		`"out/bad\nname"`: "name contains a control character (such as a newline)",
	}, c.refused)
	assert.Equal(t, initproto.Collected{Files: 3, Bytes: int64(len(big)) + 1, Visited: 8}, c.end)
	assert.Empty(t, b.sent())
}

// A file that grows while it is sent ends with FileEnd.Refused, and is
// refused: the worker drops what it got.
func TestCollectChanged(t *testing.T) {
	b := newBox(t)
	p := filepath.Join(b.ws, "grow.log")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("x"), 4<<20), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(b.ws, "still.log"), []byte("still"), 0o644))
	done := b.handle(jsonFrame(t, initproto.TypeCollect, initproto.Collect{Patterns: []string{"*.log"}}))
	c := b.readCollection(func(h initproto.FileHdr) {
		if h.Path != "grow.log" {
			return
		}
		// Init is blocked on the socket well before the end of 4 MiB.
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("more")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	})
	assert.Empty(t, <-done)
	assert.Equal(t, map[string]string{"grow.log": "changed while collected"}, c.dropped)
	assert.Equal(t, map[string]string{"grow.log": "changed while collected"}, c.refused)
	assert.Len(t, c.files["grow.log"], 4<<20, "no byte past the size seen at the open")
	assert.Equal(t, []byte("still"), c.files["still.log"])
	assert.Equal(t, initproto.Collected{Files: 1, Bytes: 5, Visited: 2}, c.end)
}

func TestCollectNoWorkspace(t *testing.T) {
	b := newBox(t)
	workspaceDir = filepath.Join(b.ws, "missing")
	done := b.handle(jsonFrame(t, initproto.TypeCollect, initproto.Collect{Patterns: []string{"**"}}))
	c := b.readCollection(nil)
	assert.Empty(t, <-done)
	assert.Equal(t, initproto.Collected{}, c.end)
	assert.Empty(t, c.refused)

	// A workspace that is a symlink is refused, not followed.
	require.NoError(t, os.Symlink("/etc", workspaceDir))
	done = b.handle(jsonFrame(t, initproto.TypeCollect, initproto.Collect{Patterns: []string{"passwd"}}))
	c = b.readCollection(nil)
	assert.Empty(t, <-done)
	assert.Equal(t, map[string]string{".": "the workspace cannot be opened: is a symlink; not followed"}, c.refused)
	assert.Empty(t, c.files)
}
