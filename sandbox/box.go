package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

// Container labels.
const (
	LabelManaged = "io.paddock.managed"
	LabelOwner   = "io.paddock.owner"
	LabelProfile = "io.paddock.profile"
	LabelJob     = "io.paddock.job"
	LabelAttempt = "io.paddock.run"
	// InitTarget is where paddock-init is mounted in every container.
	InitTarget = "/.paddock/init"
	// InstallDir is the exec-allowed tmpfs the heal loop installs into
	// (healer.DefaultPrefix); its bin directories end the default PATH.
	InstallDir = "/.paddock/root"
	// BrokerTarget is where a box of a runtime with Config.BrokerSocket
	// finds the secrets broker's socket (Session.Broker).
	BrokerTarget = "/.paddock/broker.sock"
)

// brokerSocket is the name of a box's broker socket in its control
// directory (on the host).
const brokerSocket = "broker.sock"

// DockerClient lists the engine calls the sandbox makes.
type DockerClient interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerAttach(ctx context.Context, id string, options client.ContainerAttachOptions) (client.ContainerAttachResult, error)
	ContainerStart(ctx context.Context, id string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerRemove(ctx context.Context, id string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerInspect(ctx context.Context, id string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerUpdate(ctx context.Context, id string, options client.ContainerUpdateOptions) (client.ContainerUpdateResult, error)
}

type frame struct {
	typ     byte
	payload []byte
}

// box is one started container with its private control connection to
// init. The attach stream is kept for init's stderr (diagnostics) and so
// that the engine closes init's stdin when this worker goes away.
type box struct {
	id      string
	name    string
	key     string
	dir     string // host directory bind-mounted at initproto.CtlDir
	created time.Time

	ctl     *net.UnixConn
	att     client.HijackedResponse
	wmu     sync.Mutex
	hello   initproto.Hello
	frames  chan frame
	dead    chan struct{} // closed when the control connection ends
	closing chan struct{} // closed when the worker lets go of the box
	once    sync.Once
	err     atomic.Value // error that ended the connection
	diag    *initproto.Tail
	diagMu  sync.Mutex
	used    atomic.Bool
	demoted atomic.Bool // its CPU weight was lowered (weight.go)
	// lastBeat is when this worker last wrote a heartbeat (unix ns).
	lastBeat atomic.Int64
	// broker listens on the box's broker socket until a session takes it
	// (Session.Broker); release closes it if none did.
	bmu    sync.Mutex
	broker *net.UnixListener
}

// takeBroker returns the box's broker listener, once (nil after that, or
// when the runtime makes none).
func (b *box) takeBroker() *net.UnixListener {
	b.bmu.Lock()
	defer b.bmu.Unlock()
	ln := b.broker
	b.broker = nil
	return ln
}

func (b *box) alive() bool {
	select {
	case <-b.dead:
		return false
	default:
		return true
	}
}

// sendTimeout bounds one write to init: init always reads, so a write
// that cannot finish means init is gone or wedged.
const sendTimeout = 10 * time.Second

func (b *box) send(typ byte, payload []byte) error {
	if b.ctl == nil {
		return ErrClosed
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	_ = b.ctl.SetWriteDeadline(time.Now().Add(sendTimeout))
	return initproto.WriteFrame(b.ctl, typ, payload)
}

// release closes both connections: init sees EOF, kills everything and
// exits. Idempotent.
func (b *box) release() {
	b.once.Do(func() {
		close(b.closing)
		if b.ctl != nil {
			b.ctl.Close()
		}
		if b.att.Conn != nil {
			b.att.Close()
		}
		if ln := b.takeBroker(); ln != nil {
			ln.Close()
		}
	})
}

func (b *box) deathCause() error {
	if e, ok := b.err.Load().(error); ok {
		return e
	}
	return io.EOF
}

// initDiag returns the tail of what init wrote to stderr.
func (b *box) initDiag() string {
	b.diagMu.Lock()
	defer b.diagMu.Unlock()
	return strings.TrimSpace(string(b.diag.Bytes()))
}

// frameBuffer is how many of init's frames wait for their reader: with
// every byte of output streamed, each holds up to initproto.ChunkSize, so a
// box buffers at most 128 KiB; beyond it init (and the command) wait. (It
// was 8: 16 floods held 2 MiB more in frames; the reader only copies each.)
const frameBuffer = 4

// chunkPool holds the buffers of output frames (at most ChunkSize): a
// stream of every byte of a command's output would otherwise allocate one
// per frame. Session.await gives each back once its bytes were copied.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, initproto.ChunkSize); return &b }}

// frameBuf returns a buffer of n bytes for a frame's payload.
func frameBuf(n int) []byte {
	if n == 0 || n > initproto.ChunkSize {
		return make([]byte, n)
	}
	return (*chunkPool.Get().(*[]byte))[:n]
}

// releaseFrame gives an output frame's buffer back; the caller no longer
// holds any part of p.
func releaseFrame(p []byte) {
	if cap(p) == initproto.ChunkSize {
		p = p[:cap(p)]
		chunkPool.Put(&p)
	}
}

// readLoop parses init's frames from the control connection. It never
// blocks after the box is released, whoever still reads.
func (b *box) readLoop() {
	defer close(b.dead)
	defer close(b.frames)
	r := bufio.NewReaderSize(b.ctl, 64<<10)
	for {
		typ, p, err := initproto.ReadFrameBuf(r, initproto.MaxReply, frameBuf)
		if err != nil {
			b.err.Store(err)
			return
		}
		select {
		case b.frames <- frame{typ, p}:
		case <-b.closing:
			return
		}
	}
}

// heartbeat keeps init's watchdog fed until the box is released or dead.
func (b *box) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if b.send(initproto.TypeHeartbeat, nil) != nil {
				return
			}
			b.lastBeat.Store(time.Now().UnixNano())
		case <-b.closing:
			return
		case <-b.dead:
			return
		}
	}
}

// attachLoop keeps init's stderr (Docker's multiplexed attach stream:
// 8-byte headers of stream, 0, 0, 0, big-endian size) for diagnostics.
func (b *box) attachLoop() {
	r := b.att.Reader
	var hdr [8]byte
	buf := make([]byte, 4096)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		for n := int(binary.BigEndian.Uint32(hdr[4:])); n > 0; {
			k, err := io.ReadFull(r, buf[:min(n, len(buf))])
			if hdr[0] == 2 {
				b.diagMu.Lock()
				_, _ = b.diag.Write(buf[:k])
				b.diagMu.Unlock()
			}
			n -= k
			if err != nil {
				return
			}
		}
	}
}

// listenControl makes the box's control directory and listens on the
// socket in it. The directory is mounted read-only in the box; the socket
// lives only until init's one connection is accepted.
func (r *Runtime) listenControl(seq int64) (string, *net.UnixListener, error) {
	dir := filepath.Join(r.runDir, strconv.FormatInt(seq, 10))
	_ = os.RemoveAll(dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, err
	}
	ln, err := listenSocket(filepath.Join(dir, filepath.Base(initproto.CtlSocket)))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, ln, nil
}

// listenSocket listens on a unix socket at path that the box's user may
// connect to; nobody else can reach it (the run directory above its box's
// directory is 0700, and only that box mounts its directory). Closing the
// listener unlinks the socket.
func listenSocket(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// acceptInit accepts init's one connection, then closes and unlinks the
// listener: no later connection is possible. Nothing else can have come
// first: no job runs before init's hello, and on the host the directory is
// private to this worker (its owner directory is 0700). The peer's uid is
// not checked: under user-namespace remapping (rootless Docker) the worker
// sees a mapped uid, not the box's.
func (r *Runtime) acceptInit(ctx context.Context, ln *net.UnixListener) (*net.UnixConn, error) {
	defer ln.Close() // unlinks the socket
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(r.cfg.StartTimeout)
	}
	_ = ln.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = ln.SetDeadline(time.Now()) })
	defer stop()
	conn, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// startBox creates, attaches and starts a container for p, accepts init's
// control connection and waits for its hello.
func (r *Runtime) startBox(ctx context.Context, p Profile, labels map[string]string) (*box, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	seq := r.seq.Add(1)
	name := fmt.Sprintf("paddock-%s-%d", sanitizeName(r.cfg.Owner), seq)
	r.track(name, true)

	dir, ln, err := r.listenControl(seq)
	var bln *net.UnixListener
	if err == nil && r.cfg.BrokerSocket {
		if bln, err = listenSocket(filepath.Join(dir, brokerSocket)); err != nil {
			ln.Close()
			os.RemoveAll(dir)
		}
	}
	if err != nil {
		r.track(name, false)
		return nil, infra("control socket", fmt.Errorf("%w (the run directory %s must be writable by the worker and visible to the Docker engine at the same path)", err, r.runDir), true)
	}
	id, err := r.createContainer(ctx, name, p, dir, labels)
	if err != nil {
		ln.Close()
		if bln != nil {
			bln.Close()
		}
		os.RemoveAll(dir)
		r.track(name, false)
		return nil, err
	}
	b := &box{id: id, name: name, key: p.key(), dir: dir, created: time.Now(), broker: bln,
		frames: make(chan frame, frameBuffer), dead: make(chan struct{}), closing: make(chan struct{}), diag: initproto.NewTail(4096)}
	if err := r.bootBox(ctx, b, ln); err != nil {
		return nil, err
	}
	if b.hello.Bash == "" && b.hello.Sh == "" {
		r.destroy(b)
		return nil, infra("start container", fmt.Errorf("image %q has neither bash nor sh on the default PATH", p.Image), false)
	}
	b.lastBeat.Store(time.Now().UnixNano())
	go b.heartbeat(r.cfg.HeartbeatInterval)
	return b, nil
}

// createContainer creates the container of a box for p whose control
// directory is dir, and returns its id; its error is an *InfraError.
func (r *Runtime) createContainer(ctx context.Context, name string, p Profile, dir string, labels map[string]string) (string, error) {
	// Create is not cancelable: a create cut short by cancellation can
	// leave a container whose id we never learn. It has its own timeout.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StartTimeout)
	defer ccancel()
	created, err := r.docker.ContainerCreate(cctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     r.containerConfig(p, labels),
		HostConfig: r.hostConfig(p, dir),
	})
	if err != nil {
		retry := !cerrdefs.IsNotFound(err) && !cerrdefs.IsInvalidArgument(err)
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("%w (image %q is not on this host: build it with `make images` or load it)", err, p.Image)
		}
		return "", infra("create container", err, retry)
	}
	return created.ID, nil
}

// containerConfig runs init in p's image, its stdin and stderr attached to
// this worker, labelled managed, owner and profile plus the caller's
// labels (which win on a clash).
func (r *Runtime) containerConfig(p Profile, labels map[string]string) *container.Config {
	lbl := map[string]string{LabelManaged: "1", LabelOwner: r.cfg.Owner, LabelProfile: shortHash(p.key())}
	for k, v := range labels {
		lbl[k] = v
	}
	return &container.Config{
		Image:           p.Image,
		Entrypoint:      []string{InitTarget},
		Cmd:             []string{initproto.WatchdogFlag + strconv.FormatInt(r.cfg.Watchdog.Milliseconds(), 10)},
		User:            r.cfg.User,
		WorkingDir:      "/",
		Env:             []string{},
		Labels:          lbl,
		AttachStdin:     true,
		AttachStderr:    true,
		OpenStdin:       true,
		StdinOnce:       true,
		NetworkDisabled: true,
		StopSignal:      "SIGKILL",
	}
}

// hostConfig is the box's confinement: no network, a read-only root with
// the mounts of boxMounts, no capabilities or new privileges, p's
// resources and the runtime's ulimits; the engine removes it on exit and
// keeps no logs.
func (r *Runtime) hostConfig(p Profile, dir string) *container.HostConfig {
	mounts, tmpfs := r.boxMounts(p, dir)
	memBytes := p.MemoryMB << 20
	pids := p.Pids
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs:          tmpfs,
		Mounts:         mounts,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        "private",
		AutoRemove:     true,
		LogConfig:      container.LogConfig{Type: "none"},
		Runtime:        r.cfg.Runtime,
		Resources: container.Resources{
			Memory:     memBytes,
			MemorySwap: memBytes,
			NanoCPUs:   int64(p.CPUs * 1e9),
			CPUShares:  r.cfg.CPUShares, // weight.go
			CpusetCpus: r.cfg.CPUSet,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: r.cfg.NoFile, Hard: r.cfg.NoFile},
				{Name: "fsize", Soft: r.cfg.FsizeBytes, Hard: r.cfg.FsizeBytes},
				{Name: "core", Soft: 0, Hard: 0},
				// No process may raise its priority (init demotes the job's).
				{Name: "nice", Soft: 0, Hard: 0},
			},
		},
	}
	if r.cfg.Runtime != "runsc" { // gVisor rejects --pids-limit
		hc.Resources.PidsLimit = &pids
	}
	swappiness := int64(0)
	if r.cfg.Runtime == "" || r.cfg.Runtime == "runc" {
		hc.Resources.MemorySwappiness = &swappiness
	}
	return hc
}

// boxMounts returns the box's bind mounts (init, its control directory
// dir, p's mounts, the extra mounts) and its tmpfs mounts: /tmp, the
// workspace unless p mounts one, and the install dir when it is on.
func (r *Runtime) boxMounts(p Profile, dir string) ([]mount.Mount, map[string]string) {
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: r.cfg.InitPath, Target: InitTarget, ReadOnly: true},
		{Type: mount.TypeBind, Source: dir, Target: initproto.CtlDir, ReadOnly: true},
	}
	if r.cfg.BrokerSocket {
		// A socket on a read-only mount still takes connections.
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(dir, brokerSocket), Target: BrokerTarget, ReadOnly: true})
	}
	tmpfs := map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%dm,mode=1777", p.TmpfsMB)}
	hasWorkspace := false
	for _, m := range p.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
		hasWorkspace = hasWorkspace || m.Target == WorkspaceDir
	}
	if !hasWorkspace {
		tmpfs[WorkspaceDir] = fmt.Sprintf("rw,nosuid,nodev,size=%dm,mode=1777", p.TmpfsMB)
	}
	if r.cfg.InstallTmpfsMB > 0 {
		uid, gid, _ := numericUser(r.cfg.User)
		tmpfs[InstallDir] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%dm,mode=0755,uid=%s,gid=%s", r.cfg.InstallTmpfsMB, uid, gid)
	}
	for _, m := range r.cfg.ExtraMounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: true})
	}
	return mounts, tmpfs
}

// bootBox attaches to b's created container and starts it, accepts init's
// control connection on ln and waits for init's hello into b.hello. On
// failure it destroys b (ln closed, init's last words added to the error)
// and returns an *InfraError.
func (r *Runtime) bootBox(ctx context.Context, b *box, ln *net.UnixListener) error {
	fail := func(op string, err error) error {
		ln.Close()
		if b.ctl == nil {
			close(b.dead)
		}
		r.destroy(b)
		if d := b.initDiag(); d != "" {
			err = fmt.Errorf("%w (init: %s)", err, d)
		}
		return infra(op, err, true)
	}
	att, err := r.docker.ContainerAttach(ctx, b.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stderr: true})
	if err != nil {
		return fail("attach container", err)
	}
	b.att = att.HijackedResponse
	go b.attachLoop()
	if _, err := r.docker.ContainerStart(ctx, b.id, client.ContainerStartOptions{}); err != nil {
		return fail("start container", err)
	}
	conn, err := r.acceptInit(ctx, ln)
	if err != nil {
		return fail("wait for init", fmt.Errorf("init did not connect: %w", err))
	}
	b.ctl = conn
	go b.readLoop()
	select {
	case f, ok := <-b.frames:
		if !ok {
			return fail("wait for init", fmt.Errorf("init hung up before its hello: %v", b.deathCause()))
		}
		if f.typ != initproto.TypeHello || json.Unmarshal(f.payload, &b.hello) != nil || b.hello.Version != initproto.Version {
			return fail("wait for init", fmt.Errorf("unexpected first frame %q from init (a paddock-init of another version?)", f.typ))
		}
	case <-ctx.Done():
		return fail("wait for init", ctx.Err())
	}
	return nil
}

// ended explains a box whose control connection ended while a command of
// the job ran and the worker had not let go of it. The engine is asked
// about the container: when it cannot answer, the failure is the engine's
// (infra, retried); when it can, nothing but the job's own processes were
// in the box, so the job caused it, and the reason says how.
func (r *Runtime) ended(b *box) (Reason, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	diag := b.initDiag()
	// init's last words, if it wrote any, are on the attach stream: give
	// them a moment to arrive.
	for i := 0; i < 20 && diag == ""; i++ {
		time.Sleep(5 * time.Millisecond)
		diag = b.initDiag()
	}
	res, err := r.inspectEnded(ctx, b)
	if err != nil && !cerrdefs.IsNotFound(err) {
		return "", "", infra("inspect ended container", err, true)
	}
	if containsAny(diag, "worker silent") {
		// init's watchdog fired. If this worker's heartbeats stopped (it
		// was stopped or starved), that is no fault of the job. If they
		// went on, init could not read them: the job's load starved it.
		if silent := time.Since(time.Unix(0, b.lastBeat.Load())); silent > r.cfg.Watchdog/2 {
			return "", "", infra("run command", fmt.Errorf("the box's watchdog ended it: this worker wrote no heartbeat for %s (stopped or starved?)", silent.Round(time.Millisecond)), true)
		}
		return ReasonTimeout, fmt.Sprintf("the sandbox stopped answering for %s under the job's load (a fork storm at the memory limit starves the box's init), so its watchdog killed every process", r.cfg.Watchdog), nil
	}
	why := "the sandbox's init ended while the command ran"
	if diag != "" {
		last := diag[max(0, len(diag)-300):]
		why += " (init's last words: " + strings.ToValidUTF8(last, "?") + ")"
	}
	// The Go runtime's last words when the kernel refused it: a thread it
	// could not create (clone: EAGAIN from the pids cgroup, ENOMEM from the
	// memory cgroup) or memory it could not map.
	switch {
	case err == nil && res.Container.State != nil && res.Container.State.OOMKilled:
		return ReasonOOM, why + "; the container's memory limit was reached", nil
	case containsAny(diag, "errno=12", "cannot allocate memory", "out of memory"):
		return ReasonOOM, why + "; the job took all of its memory", nil
	case containsAny(diag, "failed to create new OS thread", "pthread_create failed", "errno=11", "resource temporarily unavailable"):
		return ReasonPidsLimit, why + "; the job took every process slot", nil
	}
	return ReasonSignal, why, nil
}

// inspectEnded inspects the container of a box whose init ended, once the
// engine has seen it stop (at most 2 s): the control socket closes as init
// dies, a moment before the engine records how (State.OOMKilled).
func (r *Runtime) inspectEnded(ctx context.Context, b *box) (client.ContainerInspectResult, error) {
	for i := 0; ; i++ {
		res, err := r.docker.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{})
		if err != nil || res.Container.State == nil || !res.Container.State.Running || i == 40 {
			return res, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// destroy releases the box (init then kills everything and exits) and
// queues it for removal in the background (the removal workers of
// Runtime.Start call remove).
func (r *Runtime) destroy(b *box) {
	b.release()
	r.removeQ <- b
}

// remove force-removes b's container and forgets b, whatever the outcome:
// the one removal path, taken by the background removal workers and by
// Session.Destroy. A container already gone is success. One whose removal
// is under way (the engine's auto-removal once init exited, or another
// remove) is success at once unless untilGone; with untilGone, remove
// waits until the engine no longer knows the container, or ctx ends. The
// error is the engine's or ctx's, unwrapped: the caller logs or wraps it.
func (r *Runtime) remove(ctx context.Context, b *box, untilGone bool) error {
	defer r.forget(b)
	_, err := r.docker.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil || cerrdefs.IsNotFound(err):
		return nil
	case !isRemovalInProgress(err):
		return err
	case !untilGone:
		return nil
	}
	for ctx.Err() == nil {
		if _, err := r.docker.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// forget drops a removed box from the runtime's books and its control
// directory from the host.
func (r *Runtime) forget(b *box) {
	r.track(b.name, false)
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

func isRemovalInProgress(err error) bool {
	return err != nil && (cerrdefs.IsConflict(err) || containsAny(err.Error(), "removal of container", "is already in progress", "No such container"))
}

func containsAny(s string, subs ...string) bool {
	s = strings.ToLower(s)
	for _, x := range subs {
		if strings.Contains(s, strings.ToLower(x)) {
			return true
		}
	}
	return false
}

func sanitizeName(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(out) < 40; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			out = append(out, c)
		} else {
			out = append(out, '_')
		}
	}
	return string(out)
}

func shortHash(s string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}
