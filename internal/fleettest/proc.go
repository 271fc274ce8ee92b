package fleettest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one process of the fleet, run in a host's namespace, its output
// in dir/<name>.log (appended across restarts).
type proc struct {
	name, ns string
	argv     []string
	log      string

	// supervised: restarted a second after an exit the harness did not
	// cause, as systemd's Restart=always or compose's restart policy would.
	supervised bool

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	from     int64    // the log's size when the last start began
	wanted   bool     // up unless the harness stopped it
	restarts int      // by the supervisor
	exits    []string // the last log line before each of those restarts
}

func newProc(dir, name, ns string, argv ...string) *proc {
	return &proc{name: name, ns: ns, argv: argv, log: filepath.Join(dir, name+".log")}
}

// start runs the process (again, after a kill); it never outlives the
// test binary (Pdeathsig survives ip's exec).
func (p *proc) start() error {
	lf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	st, err := lf.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "==== %s start %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(p.argv, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.ns}, p.argv...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.from, p.wanted = cmd, done, st.Size(), true
	p.mu.Unlock()
	go p.wait(cmd, done)
	return nil
}

// wait reaps cmd and, for a supervised process that exited on its own,
// starts it again after a second.
func (p *proc) wait(cmd *exec.Cmd, done chan struct{}) {
	_ = cmd.Wait()
	close(done)
	if !p.supervised {
		return
	}
	time.Sleep(time.Second) // the supervisor's restart delay
	p.mu.Lock()
	again := p.wanted && p.cmd == cmd
	p.mu.Unlock()
	if again {
		last := p.tail(1)
		p.mu.Lock()
		p.restarts++
		p.exits = append(p.exits, last)
		p.mu.Unlock()
	}
	if again {
		_ = p.start()
	}
}

// markDown tells the supervisor the process is meant to be down (before
// the harness kills it by other means, e.g. its whole host).
func (p *proc) markDown() {
	p.mu.Lock()
	p.wanted = false
	p.mu.Unlock()
}

// supervisorRestarts is how often the supervisor restarted the process.
func (p *proc) supervisorRestarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// exitLines are the last log lines before the supervisor's restarts.
func (p *proc) exitLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// running reports whether the process was started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to timeout for the exit; it reports whether
// the process is gone. A process that is not running is gone.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.wanted = false
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// kill is stop with SIGKILL, waiting until the process is reaped.
func (p *proc) kill() { p.stop(syscall.SIGKILL, time.Minute) }

// restart stops the process gracefully (SIGTERM, then SIGKILL after
// grace) and starts it again.
func (p *proc) restart(grace time.Duration) error {
	if !p.stop(syscall.SIGTERM, grace) {
		p.kill()
	}
	return p.start()
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	fh, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// logHas reports whether the log holds s since the last start.
func (p *proc) logHas(s string) bool {
	b, _ := os.ReadFile(p.log)
	p.mu.Lock()
	from := p.from
	p.mu.Unlock()
	if int64(len(b)) < from {
		return false
	}
	return strings.Contains(string(b[from:]), s)
}

// childEnv is this process's environment without Paddock, NATS and OTel
// settings: every setting of a child is on its command line.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PADDOCK_") && !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	return env
}
