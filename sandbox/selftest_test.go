package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// loosening wraps the real engine client and weakens every container it
// creates, as a host that silently ignores a limit would.
type loosening struct {
	DockerClient
	loosen func(*container.HostConfig)
}

func (l loosening) ContainerCreate(ctx context.Context, o client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	l.loosen(o.HostConfig)
	if o.HostConfig.NetworkMode != "none" {
		o.Config.NetworkDisabled = false
	}
	return l.DockerClient.ContainerCreate(ctx, o)
}

// TestSelfTestRefusesMissingLimit: each limit the probe finds missing makes
// the self-test fail, naming that limit.
func TestSelfTestRefusesMissingLimit(t *testing.T) {
	t.Parallel()
	dropUlimit := func(name string) func(*container.HostConfig) {
		return func(hc *container.HostConfig) {
			keep := hc.Ulimits[:0]
			for _, u := range hc.Ulimits {
				if u.Name != name {
					keep = append(keep, u)
				}
			}
			hc.Ulimits = keep
		}
	}
	cases := []struct {
		name, want string
		loosen     func(*container.HostConfig)
	}{
		{"swap", "swap: ", func(hc *container.HostConfig) { hc.MemorySwap = -1 }},
		{"cpu quota", "cpu: ", func(hc *container.HostConfig) { hc.NanoCPUs = 0 }},
		{"nofile", "nofile: ", dropUlimit("nofile")},
		{"fsize", "fsize: ", dropUlimit("fsize")},
		{"tmpfs size", "tmpfs size: ", func(hc *container.HostConfig) {
			hc.Tmpfs["/tmp"] = strings.Replace(hc.Tmpfs["/tmp"], "size=16m", "size=32m", 1)
		}},
		{"pids", "pids: ", func(hc *container.HostConfig) { hc.PidsLimit = nil }},
		{"memory", "memory: ", func(hc *container.HostConfig) { hc.Memory, hc.MemorySwap = 0, 0 }},
		{"read-only root", "read-only root: ", func(hc *container.HostConfig) { hc.ReadonlyRootfs = false }},
		{"network", "network: ", func(hc *container.HostConfig) { hc.NetworkMode = "bridge" }},
	}
	d := testsvc.Docker(t)
	testsvc.RequireImage(t, d, testsvc.TestImage)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			owner := testsvc.Unique("st")
			rt, err := New(loosening{d, tc.loosen}, Config{Owner: owner, InitPath: initPath, PoolSize: -1})
			require.NoError(t, err)
			require.NoError(t, rt.Start(context.Background()))
			t.Cleanup(func() { rt.Stop(); requireNoContainers(t, d, owner) })
			err = rt.SelfTest(context.Background(), small)
			require.ErrorIs(t, err, ErrSelfTest)
			assert.Contains(t, err.Error(), tc.want)
			// Only the loosened limit is reported (problems are joined by "; ").
			assert.NotContains(t, err.Error(), "; ", "one limit named")
		})
	}
}

// inspectFails wraps the real engine client; its ContainerInspect fails as
// an engine that stopped answering would.
type inspectFails struct{ DockerClient }

func (inspectFails) ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	return client.ContainerInspectResult{}, errors.New("engine unreachable (injected)")
}

// TestBoxEndedUnderCommand: a box whose init dies while a command runs.
// When the engine answers, only the job's processes were in the box: the
// job's failure, with a reason, never a retry. When the engine does not
// answer, it is the engine's failure: retryable infra.
func TestBoxEndedUnderCommand(t *testing.T) {
	t.Parallel()
	d := testsvc.Docker(t)
	for _, tc := range []struct {
		name  string
		wrap  func(DockerClient) DockerClient
		check func(t *testing.T, out Outcome, err error)
	}{
		{"engine answers", func(c DockerClient) DockerClient { return c }, func(t *testing.T, out Outcome, err error) {
			require.ErrorIs(t, err, ErrSandboxEnded)
			assert.False(t, IsRetryable(err))
			assert.Equal(t, ReasonSignal, out.Reason)
			assert.Equal(t, -1, out.ExitCode)
			assert.Contains(t, out.Ended, "init ended while the command ran")
		}},
		{"engine does not answer", func(c DockerClient) DockerClient { return inspectFails{c} }, func(t *testing.T, out Outcome, err error) {
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrSandboxEnded)
			assert.True(t, IsRetryable(err), "%v", err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			owner := testsvc.Unique("end")
			rt, err := New(tc.wrap(d), Config{Owner: owner, InitPath: initPath, PoolSize: -1})
			require.NoError(t, err)
			require.NoError(t, rt.Start(context.Background()))
			t.Cleanup(func() { rt.Stop(); requireNoContainers(t, d, owner) })
			sess, err := rt.Acquire(context.Background(), small, SessionOptions{})
			require.NoError(t, err)
			defer sess.Close()
			var once sync.Once
			// Kill the box from outside once the command runs.
			kill := func(Stream, []byte) {
				once.Do(func() {
					go d.ContainerKill(context.Background(), sess.ContainerID(), client.ContainerKillOptions{Signal: "KILL"})
				})
			}
			out, err := sess.Run(context.Background(), Command{Script: "echo started; sleep 30", Timeout: time.Minute, OnOutput: kill})
			tc.check(t, out, err)
		})
	}
}
