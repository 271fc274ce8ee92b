// Package initproto is the framed protocol between a worker and paddock-init,
// the PID 1 of every sandbox container. It is stdlib-only so the init binary
// stays small and static.
//
// A frame is one type byte, a 4-byte big-endian payload length, and the
// payload. Frames travel over a private unix socket: the worker listens on
// a socket in a per-box directory that is bind-mounted read-only into the
// container at CtlDir, init connects once before any job command runs, and
// the worker accepts that one connection and unlinks the socket. The job's
// processes can neither open that connection nor reach init's descriptors
// (init is not dumpable), so every frame the worker reads is init's.
//
// Every frame init sends is at most ChunkSize bytes of payload, whatever the
// output caps: a command's kept tails travel as TypeTail* chunks before its
// small TypeExit frame.
package initproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Frame types.
const (
	// worker → init
	TypeRun       byte = 'C' // payload: JSON Request
	TypeProbe     byte = 'P' // payload: empty; init answers TypeFacts
	TypeHeartbeat byte = 'B' // payload: empty; init's watchdog resets
	TypePut       byte = 'W' // payload: JSON Put; then Put.Size bytes in TypeData frames
	TypeData      byte = 'D' // payload: the next bytes of the file being put
	TypeCollect   byte = 'A' // payload: JSON Collect; init answers with files and refusals
	// init → worker
	TypeHello   byte = 'H' // payload: JSON Hello, sent once at start
	TypeStdout  byte = 'O' // payload: live head bytes of the running command
	TypeStderr  byte = 'E'
	TypeTailOut byte = 'o' // payload: a chunk of the kept stdout tail, sent after the command ended
	TypeTailErr byte = 'e'
	TypeExit    byte = 'X' // payload: JSON Exit (small: no output in it)
	TypeFacts   byte = 'F' // payload: JSON Facts
	TypePutDone byte = 'K' // payload: JSON PutDone, once every TypeData of a put was read
	// A collected file: TypeFileHdr (JSON FileHdr), its bytes in
	// TypeFileData chunks of at most ChunkSize, then TypeFileEnd (JSON
	// FileEnd, which may say the file must be dropped).
	TypeFileHdr   byte = 'f'
	TypeFileData  byte = 'd'
	TypeFileEnd   byte = 'z'
	TypeRefused   byte = 'r' // payload: JSON Refusal (a path not collected, and why)
	TypeCollected byte = 'Y' // payload: JSON Collected: the collection is over
)

// MaxPayload bounds one worker → init frame (a request carries the
// command and its environment); a larger length is a protocol error.
const MaxPayload = 4 << 20

// ChunkSize bounds the output payload of one init → worker frame; MaxReply
// bounds any init → worker frame, so the worker reads with a limit that no
// output cap can change.
const (
	ChunkSize = 32 << 10
	MaxReply  = 64 << 10
)

// Version of the protocol spoken by this package.
const Version = 3

// DataChunk is the size of the TypeData frames the worker sends.
const DataChunk = 256 << 10

// In the container: the control directory, the socket in it, and the
// flag that passes the watchdog period to init.
const (
	CtlDir       = "/.paddock/ctl"
	CtlSocket    = CtlDir + "/init.sock"
	WatchdogFlag = "--watchdog-ms="
)

// ErrProtocol marks a malformed frame stream.
var ErrProtocol = errors.New("initproto: protocol error")

// Request asks init to run one command.
type Request struct {
	ID   int      `json:"id"`
	Argv []string `json:"argv"`
	// Path, when set, is the executable to run with Argv (e.g. the box's
	// own /usr/bin/bash with argv[0] "bash"); else Argv[0] is looked up
	// in the command's PATH.
	Path      string   `json:"path,omitempty"`
	Env       []string `json:"env"`
	Dir       string   `json:"dir,omitempty"`
	TimeoutMS int64    `json:"timeout_ms"`
	// OutputCap is the number of bytes kept per stream: the first half is
	// streamed live, the last half is held as a tail and sent after the
	// command ends, in chunks.
	OutputCap int64 `json:"output_cap"`
	// OutputKill is the total output (both streams) after which every
	// process of the command is killed.
	OutputKill int64 `json:"output_kill"`
	// StreamAll sends every byte of output live (TypeStdout/TypeStderr) and
	// no tail: the worker keeps head and tail itself, and can keep or
	// forward the whole output. RateBytes, when > 0, bounds what init reads
	// from the command's pipes per second (both streams): a command that
	// prints faster blocks on its writes.
	StreamAll bool  `json:"stream_all,omitempty"`
	RateBytes int64 `json:"rate_bytes,omitempty"`
	// Stdin is the command's standard input (else /dev/null).
	Stdin []byte `json:"stdin,omitempty"`
	// Spill, when set, names the files (one path element, "<job id>")
	// init writes the command's complete stdout and stderr to, as it reads
	// them: <workspace>/.paddock/out/<Spill>.stdout and .stderr, created
	// or emptied. SpillMax, when > 0, bounds each file; the bytes past it
	// are not written.
	Spill    string `json:"spill,omitempty"`
	SpillMax int64  `json:"spill_max,omitempty"`
}

// Put asks init to write a file of Size bytes, sent next as TypeData
// frames, at Path (relative to the workspace, package boxfs's rules) with
// permission Mode.
type Put struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
	Size int64  `json:"size"`
}

// PutDone answers a Put; Error is empty on success.
type PutDone struct {
	Error string `json:"error,omitempty"`
}

// Collect asks init to send the regular files under the workspace that
// match Patterns, within the limits.
type Collect struct {
	Patterns      []string `json:"patterns"`
	MaxFiles      int      `json:"max_files"`
	MaxFileBytes  int64    `json:"max_file_bytes"`
	MaxTotalBytes int64    `json:"max_total_bytes"`
	MaxVisit      int      `json:"max_visit"`
}

// FileHdr starts a collected file.
type FileHdr struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// FileEnd ends a collected file; a non-empty Refused means the bytes sent
// must be dropped (e.g. the file changed while it was read).
type FileEnd struct {
	Refused string `json:"refused,omitempty"`
}

// Refusal is a path init did not collect, and why.
type Refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Collected ends a collection.
type Collected struct {
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	Visited int   `json:"visited"`
}

// Hello is init's first frame.
type Hello struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
	UID     int `json:"uid"`
	// Shells are the absolute paths of the image's bash and sh, found at
	// start, before any job ran (so nothing a job does can change them).
	Bash string `json:"bash,omitempty"`
	Sh   string `json:"sh,omitempty"`
}

// Exit reports how a command ended. Its size does not depend on the output:
// the tails are sent before it as TypeTailOut/TypeTailErr chunks.
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
	OOMKills    int64 `json:"oom_kills,omitempty"`
	PidsMax     int64 `json:"pids_max,omitempty"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	DurationNS  int64 `json:"duration_ns"`
	// StartErr is set when the command could not be started at all.
	StartErr string `json:"start_err,omitempty"`
	// Leftover counts processes still alive after the command's main
	// process ended (background and setsid children) that init killed.
	Leftover int `json:"leftover,omitempty"`
	// SpillBytes are the bytes written to the spill files (stdout,
	// stderr); SpillErr says why a file holds less than its stream, or
	// could not be made (the cap, the fsize limit, a full disk, a path
	// the box had planted something at).
	SpillBytes [2]int64  `json:"spill_bytes,omitzero"`
	SpillErr   [2]string `json:"spill_err,omitzero"`
}

// Facts are what init observes about its own sandbox, for the worker's
// start-up self-test. -1 means unknown or unlimited.
type Facts struct {
	UID          int      `json:"uid"`
	NoNewPrivs   string   `json:"no_new_privs"`
	CapEff       string   `json:"cap_eff"`
	Seccomp      string   `json:"seccomp"`
	Dumpable     int      `json:"dumpable"` // init's own PR_GET_DUMPABLE
	RootWritable bool     `json:"root_writable"`
	TmpWritable  bool     `json:"tmp_writable"`
	TmpBytes     int64    `json:"tmp_bytes"` // size of the /tmp tmpfs
	Interfaces   []string `json:"interfaces"`
	MemoryLimit  int64    `json:"memory_limit"` // bytes
	// MemSwapLimit is memory+swap (cgroup v1 memsw) or swap alone (v2
	// swap.max, reported as MemoryLimit+swap); -2 when the kernel does not
	// account swap. Swappiness is the cgroup's memory.swappiness (-1 v2).
	MemSwapLimit int64 `json:"memswap_limit"`
	Swappiness   int64 `json:"swappiness"`
	// HostSwap is the swap space the kernel offers in all (/proc/swaps).
	HostSwap  int64 `json:"host_swap"`
	PidsLimit int64 `json:"pids_limit"`
	// CPUQuota and CPUPeriod are the CFS bandwidth limit in µs.
	CPUQuota  int64 `json:"cpu_quota"`
	CPUPeriod int64 `json:"cpu_period"`
	NoFile    int64 `json:"nofile"` // RLIMIT_NOFILE (soft)
	Fsize     int64 `json:"fsize"`  // RLIMIT_FSIZE (soft), bytes
	// OOMReadable and PidsReadable: the cgroup counters init reads to
	// detect OOM kills and refused forks are there.
	OOMReadable  bool     `json:"oom_readable"`
	PidsReadable bool     `json:"pids_readable"`
	Env          []string `json:"env"`
}

// WriteFrame writes one frame of at most MaxPayload bytes. Callers
// serialise concurrent writers.
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
	// One write keeps a frame contiguous.
	buf := make([]byte, 0, len(hdr)+len(payload))
	buf = append(append(buf, hdr[:]...), payload...)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame of at most max payload bytes into a new buffer.
func ReadFrame(r io.Reader, max int) (byte, []byte, error) {
	return ReadFrameBuf(r, max, func(n int) []byte { return make([]byte, n) })
}

// ReadFrameBuf is ReadFrame with the payload read into alloc(n), a
// buffer of exactly n bytes the caller may reuse.
func ReadFrameBuf(r io.Reader, max int, alloc func(n int) []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("%w: frame %q length %d > %d", ErrProtocol, hdr[0], n, max)
	}
	p := alloc(int(n))
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

// Take returns the kept bytes in order in the Tail's own buffer, rotated
// in place (Bytes copies them): the Tail must not be used after.
func (t *Tail) Take() []byte {
	if !t.full {
		return t.buf[:t.pos]
	}
	slices.Reverse(t.buf[:t.pos])
	slices.Reverse(t.buf[t.pos:])
	slices.Reverse(t.buf)
	b := t.buf
	*t = Tail{}
	return b
}

// Bytes returns the kept bytes in order.
func (t *Tail) Bytes() []byte {
	if !t.full {
		return append([]byte(nil), t.buf[:t.pos]...)
	}
	out := make([]byte, 0, t.size)
	return append(append(out, t.buf[t.pos:]...), t.buf[:t.pos]...)
}
