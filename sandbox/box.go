package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
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
)

// DockerClient lists the engine calls the sandbox makes.
type DockerClient interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerAttach(ctx context.Context, id string, options client.ContainerAttachOptions) (client.ContainerAttachResult, error)
	ContainerStart(ctx context.Context, id string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerRemove(ctx context.Context, id string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerInspect(ctx context.Context, id string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
}

type frame struct {
	typ     byte
	payload []byte
}

// box is one started container with its attach stream.
type box struct {
	id      string
	name    string
	key     string
	created time.Time

	conn   client.HijackedResponse
	wmu    sync.Mutex
	frames chan frame
	dead   chan struct{} // closed when the attach stream ends
	err    atomic.Value  // error that ended the stream
	diag   *initproto.Tail
	diagMu sync.Mutex
	used   atomic.Bool
}

func (b *box) alive() bool {
	select {
	case <-b.dead:
		return false
	default:
		return true
	}
}

func (b *box) send(typ byte, payload []byte) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return initproto.WriteFrame(b.conn.Conn, typ, payload)
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
	return string(b.diag.Bytes())
}

// readLoop demultiplexes Docker's attach stream (8-byte headers: stream,
// 0, 0, 0, big-endian size) and parses init's frames from stdout.
func (b *box) readLoop() {
	defer close(b.dead)
	defer close(b.frames)
	r := &demux{r: b.conn.Reader, stderr: func(p []byte) {
		b.diagMu.Lock()
		_, _ = b.diag.Write(p)
		b.diagMu.Unlock()
	}}
	for {
		typ, p, err := initproto.ReadFrame(r)
		if err != nil {
			b.err.Store(err)
			return
		}
		b.frames <- frame{typ, p}
	}
}

type demux struct {
	r      *bufio.Reader
	remain int
	stream byte
	stderr func([]byte)
}

func (d *demux) Read(p []byte) (int, error) {
	for d.remain == 0 || d.stream != 1 {
		if d.remain > 0 { // init's stderr: keep for diagnostics
			buf := make([]byte, min(d.remain, 4096))
			n, err := io.ReadFull(d.r, buf)
			d.stderr(buf[:n])
			d.remain -= n
			if err != nil {
				return 0, err
			}
			continue
		}
		var hdr [8]byte
		if _, err := io.ReadFull(d.r, hdr[:]); err != nil {
			return 0, err
		}
		d.stream, d.remain = hdr[0], int(binary.BigEndian.Uint32(hdr[4:]))
	}
	n, err := d.r.Read(p[:min(len(p), d.remain)])
	d.remain -= n
	return n, err
}

// startBox creates, attaches and starts a container for p and waits for
// init's hello.
func (r *Runtime) startBox(ctx context.Context, p Profile, labels map[string]string) (*box, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	seq := r.seq.Add(1)
	name := fmt.Sprintf("paddock-%s-%d", sanitizeName(r.cfg.Owner), seq)
	r.track(name, true)

	lbl := map[string]string{LabelManaged: "1", LabelOwner: r.cfg.Owner, LabelProfile: shortHash(p.key())}
	for k, v := range labels {
		lbl[k] = v
	}
	mounts := []mount.Mount{{Type: mount.TypeBind, Source: r.cfg.InitPath, Target: InitTarget, ReadOnly: true}}
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
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: r.cfg.NoFile, Hard: r.cfg.NoFile},
				{Name: "fsize", Soft: r.cfg.FsizeBytes, Hard: r.cfg.FsizeBytes},
				{Name: "core", Soft: 0, Hard: 0},
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
	// Create is not cancelable: a create cut short by cancellation can
	// leave a container whose id we never learn. It has its own timeout.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StartTimeout)
	defer ccancel()
	created, err := r.docker.ContainerCreate(cctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:           p.Image,
			Entrypoint:      []string{InitTarget},
			Cmd:             []string{},
			User:            r.cfg.User,
			WorkingDir:      "/",
			Env:             []string{},
			Labels:          lbl,
			AttachStdin:     true,
			AttachStdout:    true,
			AttachStderr:    true,
			OpenStdin:       true,
			StdinOnce:       true,
			NetworkDisabled: true,
			StopSignal:      "SIGKILL",
		},
		HostConfig: hc,
	})
	if err != nil {
		r.track(name, false)
		retry := !cerrdefs.IsNotFound(err) && !cerrdefs.IsInvalidArgument(err)
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("%w (image %q is not on this host: build it with `make images` or load it)", err, p.Image)
		}
		return nil, infra("create container", err, retry)
	}
	b := &box{id: created.ID, name: name, key: p.key(), created: time.Now(),
		frames: make(chan frame, 64), dead: make(chan struct{}), diag: initproto.NewTail(4096)}
	fail := func(op string, err error) (*box, error) {
		r.destroy(b)
		return nil, infra(op, err, true)
	}
	att, err := r.docker.ContainerAttach(ctx, b.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return fail("attach container", err)
	}
	b.conn = att.HijackedResponse
	go b.readLoop()
	if _, err := r.docker.ContainerStart(ctx, b.id, client.ContainerStartOptions{}); err != nil {
		return fail("start container", err)
	}
	select {
	case f, ok := <-b.frames:
		if !ok {
			return fail("wait for init", fmt.Errorf("container ended before init spoke: %v %s", b.deathCause(), b.initDiag()))
		}
		var h initproto.Hello
		if f.typ != initproto.TypeHello || json.Unmarshal(f.payload, &h) != nil || h.Version != initproto.Version {
			return fail("wait for init", fmt.Errorf("unexpected first frame %q from init", f.typ))
		}
	case <-ctx.Done():
		return fail("wait for init", ctx.Err())
	}
	return b, nil
}

// destroy closes the attach stream (init then kills everything and exits)
// and force-removes the container in the background.
func (r *Runtime) destroy(b *box) {
	if b.conn.Conn != nil {
		b.conn.Close()
	}
	r.removeQ <- b
}

// removeNow force-removes b synchronously; gone already is success.
func (r *Runtime) removeNow(ctx context.Context, b *box) error {
	defer r.track(b.name, false)
	_, err := r.docker.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
		return infra("remove container", err, true)
	}
	if err != nil && isRemovalInProgress(err) && !cerrdefs.IsNotFound(err) {
		// Auto-removal is under way: wait until the engine no longer knows it.
		for ctx.Err() == nil {
			if _, err := r.docker.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return infra("remove container", ctx.Err(), true)
	}
	return nil
}

// remove force-removes a container; a container already gone is success.
func (r *Runtime) remove(ctx context.Context, b *box) {
	defer r.track(b.name, false)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := r.docker.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
		r.cfg.Logger.Warn("remove container", "container", b.name, "err", err)
	}
}

func isRemovalInProgress(err error) bool {
	return err != nil && (cerrdefs.IsConflict(err) || containsAny(err.Error(), "removal of container", "is already in progress", "No such container"))
}

func containsAny(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
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
