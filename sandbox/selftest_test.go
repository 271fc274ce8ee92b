package sandbox

import (
	"context"
	"strings"
	"testing"

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
