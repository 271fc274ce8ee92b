package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox"
)

// labelBench marks every container this benchmark creates outside Paddock,
// so that a run can always clean up after itself.
const labelBench = "io.paddock.bench"

// scenario is one way of running `echo hi`. job runs it once, checks that it
// printed "hi\n", and marks its steps on rec. settle, if set, waits until the
// scenario's background work (container removal, pool refill) is done, so
// that the next measured job of any scenario runs on a quiet engine.
type scenario struct {
	name   string
	desc   string
	job    func(ctx context.Context, rec *steps) error
	settle func(ctx context.Context) error
	close  func()
}

const want = "hi\n"

func checkOut(name string, stdout, stderr []byte) error {
	if string(stdout) != want {
		return fmt.Errorf("%s: stdout %q, want %q (stderr %q)", name, stdout, want, stderr)
	}
	return nil
}

// hostScenario is a bare fork+exec of /bin/sh on the host.
func hostScenario() *scenario {
	return &scenario{
		name: "host",
		desc: "fork+exec of /bin/sh -c 'echo hi' on the host",
		job: func(ctx context.Context, rec *steps) error {
			var out, errb bytes.Buffer
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "echo hi")
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			rec.mark("fork_exec_wait")
			if err != nil {
				return err
			}
			return checkOut("host", out.Bytes(), errb.Bytes())
		},
	}
}

// paddockScenarios are jobs as the worker runs them: Acquire a never-used
// container (from the warm pool when it has one), Run, Close (removal in the
// background). "paddock" runs the same argv as every other scenario (sh -c);
// "paddock_bash" runs a Script, which the sandbox hands to bash -c as the
// worker does for agents' commands. Both share one Runtime and its pool.
func paddockScenarios(ctx context.Context, d *client.Client, image, initPath, owner string) ([]*scenario, *sandbox.Runtime, error) {
	rt, err := sandbox.New(d, sandbox.Config{Owner: owner, InitPath: initPath})
	if err != nil {
		return nil, nil, err
	}
	p := sandbox.Profile{Image: image} // the operator's default profile
	if err := rt.Start(ctx, p); err != nil {
		return nil, nil, err
	}
	const poolSize = 2 // sandbox.Config's default, as the worker uses it
	var closed atomic.Int64
	job := func(name string, cmd sandbox.Command) func(ctx context.Context, rec *steps) error {
		return func(ctx context.Context, rec *steps) error {
			sess, err := rt.Acquire(ctx, p, sandbox.SessionOptions{Deadline: time.Now().Add(2 * time.Minute)})
			rec.mark("acquire")
			if err != nil {
				return err
			}
			if sess.Pooled {
				rec.count("pool_hit")
			} else {
				rec.count("cold_start")
			}
			t := time.Now()
			out, err := sess.Run(ctx, cmd)
			run := time.Since(t)
			rec.mark("run")
			sess.Close()
			closed.Add(1)
			rec.mark("close")
			// init's own measure of the command (start to exit, cgroup
			// reads and leftover sweep included), and the rest of Run: the
			// round trip through dockerd's attach stream and the worker.
			rec.note("run.in_container", out.Duration)
			rec.note("run.transport", run-out.Duration)
			if err != nil {
				return err
			}
			if out.Reason != sandbox.ReasonOK {
				return fmt.Errorf("%s: reason %s exit %d stderr %q", name, out.Reason, out.ExitCode, out.Stderr.Head)
			}
			return checkOut(name, out.Stdout.Head, out.Stderr.Head)
		}
	}
	settle := func(ctx context.Context) error {
		deadline := time.Now().Add(2 * time.Minute)
		for rt.PoolSize() < poolSize || rt.Stats().Removed.Load() < closed.Load() {
			if time.Now().After(deadline) {
				return fmt.Errorf("paddock: pool not refilled (%d warm, %d/%d removed)",
					rt.PoolSize(), rt.Stats().Removed.Load(), closed.Load())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	}
	return []*scenario{{
		name:   "paddock",
		desc:   "sandbox.Runtime: Acquire (warm pool) → Run argv sh -c 'echo hi' → Close; a fresh capped container per job",
		job:    job("paddock", sandbox.Command{Argv: []string{"sh", "-c", "echo hi"}, Timeout: 30 * time.Second}),
		settle: settle,
		close:  rt.Stop,
	}, {
		name:   "paddock_bash",
		desc:   "as paddock, with Command.Script 'echo hi' (bash -c, the worker's path for agents' commands)",
		job:    job("paddock_bash", sandbox.Command{Script: "echo hi", Timeout: 30 * time.Second}),
		settle: settle,
	}}, rt, nil
}

// dockerExecScenario execs into one long-lived container through the API:
// exec create, attach+start (one hijacked call, as the CLI does), inspect.
func dockerExecScenario(ctx context.Context, d *client.Client, image, runID string) (*scenario, error) {
	c, err := d.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Cmd: []string{"sleep", "1000000"}, User: "1000:1000", Labels: map[string]string{labelBench: runID}},
		HostConfig: cappedHostConfig(),
	})
	if err != nil {
		return nil, fmt.Errorf("docker_exec: create: %w", err)
	}
	id := c.ID
	rm := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = d.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	}
	if _, err := d.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		rm()
		return nil, fmt.Errorf("docker_exec: start: %w", err)
	}
	return &scenario{
		name: "docker_exec",
		desc: "docker exec into one long-lived container (API: exec create + attach/start + inspect)",
		job: func(ctx context.Context, rec *steps) error {
			ex, err := d.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: []string{"sh", "-c", "echo hi"}, AttachStdout: true, AttachStderr: true})
			rec.mark("exec_create")
			if err != nil {
				return err
			}
			att, err := d.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
			if err != nil {
				return err
			}
			var out, errb bytes.Buffer
			_, err = stdcopy.StdCopy(&out, &errb, att.Reader)
			att.Close()
			rec.mark("exec_start_read")
			if err != nil {
				return err
			}
			ins, err := d.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
			rec.mark("exec_inspect")
			if err != nil {
				return err
			}
			if ins.Running || ins.ExitCode != 0 {
				return fmt.Errorf("docker_exec: running %v exit %d", ins.Running, ins.ExitCode)
			}
			return checkOut("docker_exec", out.Bytes(), errb.Bytes())
		},
		close: rm,
	}, nil
}

// dockerRunScenario is the naive CLI: one `docker run --rm` per command.
func dockerRunScenario(image, runID string) *scenario {
	return &scenario{
		name: "docker_run",
		desc: "docker run --rm --network none IMAGE sh -c 'echo hi' (CLI, one container per command)",
		job: func(ctx context.Context, rec *steps) error {
			var out, errb bytes.Buffer
			cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", "--label", labelBench+"="+runID,
				image, "sh", "-c", "echo hi")
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			rec.mark("docker_run")
			if err != nil {
				return fmt.Errorf("docker run: %w: %s", err, errb.Bytes())
			}
			return checkOut("docker_run", out.Bytes(), errb.Bytes())
		},
	}
}

// cappedHostConfig is the container configuration of Paddock's default
// profile (README Sandbox defaults, sandbox/box.go), without Paddock's init mount: the
// raw engine is measured on the same containers Paddock asks for, so the
// comparison isolates Paddock's own pipeline (pool, init, async removal).
func cappedHostConfig() *container.HostConfig {
	pids, swappiness := int64(64), int64(0)
	return &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		Tmpfs: map[string]string{"/tmp": "rw,nosuid,nodev,size=64m,mode=1777",
			"/workspace":     "rw,nosuid,nodev,size=64m,mode=1777",
			"/.paddock/root": "rw,exec,nosuid,nodev,size=256m,mode=0755,uid=1000,gid=1000"},
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		IpcMode:     "private",
		LogConfig:   container.LogConfig{Type: "none"},
		Resources: container.Resources{
			Memory: 512 << 20, MemorySwap: 512 << 20, NanoCPUs: 5e8, PidsLimit: &pids, MemorySwappiness: &swappiness,
			Ulimits: []*container.Ulimit{{Name: "nofile", Soft: 1024, Hard: 1024},
				{Name: "fsize", Soft: 256 << 20, Hard: 256 << 20}, {Name: "core"}},
		},
	}
}

// engineRawScenario is the engine's own lifecycle rate through the API,
// with no Paddock code: create, attach, start, read to EOF, wait, remove, on
// containers configured as Paddock's default profile.
func engineRawScenario(d *client.Client, image, runID string) *scenario {
	return &scenario{
		name: "engine_raw",
		desc: "API create + attach + start + wait + remove per command, Paddock's container config, no Paddock code",
		job: func(ctx context.Context, rec *steps) (err error) {
			c, err := d.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config: &container.Config{Image: image, Cmd: []string{"sh", "-c", "echo hi"}, User: "1000:1000",
					AttachStdout: true, AttachStderr: true, Labels: map[string]string{labelBench: runID}},
				HostConfig: cappedHostConfig(),
			})
			rec.mark("create")
			if err != nil {
				return err
			}
			removed := false
			defer func() {
				if !removed {
					rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, _ = d.ContainerRemove(rctx, c.ID, client.ContainerRemoveOptions{Force: true})
				}
			}()
			att, err := d.ContainerAttach(ctx, c.ID, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
			rec.mark("attach")
			if err != nil {
				return err
			}
			defer att.Close()
			if _, err := d.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
				return err
			}
			rec.mark("start")
			var out, errb bytes.Buffer
			if _, err := stdcopy.StdCopy(&out, &errb, att.Reader); err != nil {
				return err
			}
			rec.mark("read_output")
			w := d.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
			select {
			case res := <-w.Result:
				if res.StatusCode != 0 {
					return fmt.Errorf("engine_raw: exit %d", res.StatusCode)
				}
			case err := <-w.Error:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
			rec.mark("wait")
			_, err = d.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{})
			rec.mark("remove")
			if err != nil {
				return err
			}
			removed = true
			return checkOut("engine_raw", out.Bytes(), errb.Bytes())
		},
	}
}

// removeLabelled removes every container this run created outside Paddock.
func removeLabelled(d *client.Client, runID string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := d.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelBench+"="+runID)})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, c := range list.Items {
		if _, err := d.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			errs = append(errs, err)
		}
	}
	return len(list.Items), errors.Join(errs...)
}
