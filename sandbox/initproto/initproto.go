// Package initproto is the framed protocol between a worker and paddock-init,
// the PID 1 of every sandbox container. It is stdlib-only so the init binary
// stays small and static.
//
// A frame is one type byte, a 4-byte big-endian payload length, and the
// payload. The worker writes frames to the container's attached stdin; the
// init writes frames to its stdout. Nothing else is written to stdout.
package initproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	// worker → init
	TypeRun   byte = 'C' // payload: JSON Request
	TypeProbe byte = 'P' // payload: empty; init answers TypeFacts
	// init → worker
	TypeHello  byte = 'H' // payload: JSON Hello, sent once at start
	TypeStdout byte = 'O' // payload: output bytes of the running command
	TypeStderr byte = 'E'
	TypeExit   byte = 'X' // payload: JSON Exit
	TypeFacts  byte = 'F' // payload: JSON Facts
)

// MaxPayload bounds one frame; a larger length is a protocol error.
const MaxPayload = 4 << 20

// Version of the protocol spoken by this package.
const Version = 1

// ErrProtocol marks a malformed frame stream.
var ErrProtocol = errors.New("initproto: protocol error")

// Request asks init to run one command.
type Request struct {
	ID        int      `json:"id"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Dir       string   `json:"dir,omitempty"`
	TimeoutMS int64    `json:"timeout_ms"`
	// OutputCap is the number of bytes kept per stream: the first half is
	// streamed live, the last half is held as a tail and sent in Exit.
	OutputCap int64 `json:"output_cap"`
	// OutputKill is the total output (both streams) after which every
	// process of the command is killed.
	OutputKill int64 `json:"output_kill"`
}

// Hello is init's first frame.
type Hello struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
	UID     int `json:"uid"`
}

// Exit reports how a command ended.
type Exit struct {
	ID       int  `json:"id"`
	ExitCode int  `json:"exit_code"` // -1 when killed by a signal
	Signal   int  `json:"signal,omitempty"`
	TimedOut bool `json:"timed_out,omitempty"`
	// OutputKilled: the command printed more than OutputKill.
	OutputKilled bool `json:"output_killed,omitempty"`
	// PidsKilled: the pids cgroup refused a fork and init killed the command.
	PidsKilled bool `json:"pids_killed,omitempty"`
	// OOMKills and PidsMax are the cgroup counter deltas over the command.
	OOMKills    int64  `json:"oom_kills,omitempty"`
	PidsMax     int64  `json:"pids_max,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	StdoutTail  []byte `json:"stdout_tail,omitempty"`
	StderrTail  []byte `json:"stderr_tail,omitempty"`
	DurationNS  int64  `json:"duration_ns"`
	// StartErr is set when the command could not be started at all.
	StartErr string `json:"start_err,omitempty"`
	// Leftover counts processes still alive after the command's main
	// process ended (background and setsid children) that init killed.
	Leftover int `json:"leftover,omitempty"`
}

// Facts are what init observes about its own sandbox, for the worker's
// start-up self-test.
type Facts struct {
	UID            int      `json:"uid"`
	NoNewPrivs     string   `json:"no_new_privs"`
	CapEff         string   `json:"cap_eff"`
	Seccomp        string   `json:"seccomp"`
	RootWritable   bool     `json:"root_writable"`
	TmpWritable    bool     `json:"tmp_writable"`
	Interfaces     []string `json:"interfaces"`
	MemoryLimit    int64    `json:"memory_limit"` // bytes, -1 unknown
	PidsLimit      int64    `json:"pids_limit"`   // -1 unknown or max
	CgroupReadable bool     `json:"cgroup_readable"`
	Env            []string `json:"env"`
}

// WriteFrame writes one frame. Callers serialise concurrent writers.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w: payload %d > %d", ErrProtocol, len(payload), MaxPayload)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if len(payload) == 0 {
		_, err := w.Write(hdr[:])
		return err
	}
	// One write for small frames keeps a frame contiguous on the pipe.
	buf := make([]byte, 0, len(hdr)+len(payload))
	buf = append(append(buf, hdr[:]...), payload...)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame into a new buffer.
func ReadFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("%w: frame length %d > %d", ErrProtocol, n, MaxPayload)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], p, nil
}

// Tail keeps the last N bytes written to it.
type Tail struct {
	buf  []byte
	size int
	full bool
	pos  int
}

// NewTail returns a Tail keeping n bytes.
func NewTail(n int) *Tail { return &Tail{buf: make([]byte, max(n, 0)), size: max(n, 0)} }

// Write keeps the last bytes of p.
func (t *Tail) Write(p []byte) (int, error) {
	n := len(p)
	if t.size == 0 {
		return n, nil
	}
	if len(p) >= t.size {
		copy(t.buf, p[len(p)-t.size:])
		t.pos, t.full = 0, true
		return n, nil
	}
	k := copy(t.buf[t.pos:], p)
	if k < len(p) {
		copy(t.buf, p[k:])
		t.full = true
	}
	t.pos = (t.pos + len(p)) % t.size
	if t.pos == 0 && len(p) > 0 {
		t.full = true
	}
	return n, nil
}

// Bytes returns the kept bytes in order.
func (t *Tail) Bytes() []byte {
	if !t.full {
		return append([]byte(nil), t.buf[:t.pos]...)
	}
	out := make([]byte, 0, t.size)
	return append(append(out, t.buf[t.pos:]...), t.buf[:t.pos]...)
}
