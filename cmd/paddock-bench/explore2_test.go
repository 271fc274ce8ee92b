package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox"
)

var cmdIndex = 2

func TestExploreTiming(t *testing.T) {
	d, _ := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	rt, err := sandbox.New(d, sandbox.Config{Owner: "explore", InitPath: "/tmp/pinit-t/paddock-init", PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer rt.Stop()
	phases := map[string][]float64{}
	var order []string
	for range 15 {
		s, err := rt.Acquire(context.Background(), sandbox.Profile{Image: "paddock/test:latest"}, sandbox.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		for k := range cmdIndex {
			_, _ = s.Run(context.Background(), sandbox.Command{Script: "echo $EPOCHREALTIME"})
			_ = k
		}
		_, _ = s.Run(context.Background(), sandbox.Command{Script: "rm -f /tmp/.t"})
		t0 := time.Now()
		out, err := s.Run(context.Background(), sandbox.Command{Script: "echo $EPOCHREALTIME"})
		t1 := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		bashT, _ := strconv.ParseFloat(strings.TrimSpace(string(out.Stdout.Head)), 64)
		tm, _ := s.Run(context.Background(), sandbox.Command{Script: "cat /tmp/.t"})
		s.Close()
		prev := t0.UnixNano()
		lines := strings.Split(strings.TrimSpace(string(tm.Stdout.Head)), "\n")
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 2 {
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			if v < t0.UnixNano() {
				continue
			}
			if f[0] == "reaped" {
				bn := int64(bashT * 1e9)
				if _, ok := phases["bash_echo"]; !ok {
					order = append(order, "bash_echo")
				}
				phases["bash_echo"] = append(phases["bash_echo"], float64(bn-prev)/1e6)
				prev = bn
			}
			if _, ok := phases[f[0]]; !ok {
				order = append(order, f[0])
			}
			phases[f[0]] = append(phases[f[0]], float64(v-prev)/1e6)
			prev = v
		}
		if _, ok := phases["worker_recv"]; !ok {
			order = append(order, "worker_recv")
		}
		phases["worker_recv"] = append(phases["worker_recv"], float64(t1.UnixNano()-prev)/1e6)
		phases["total"] = append(phases["total"], float64(t1.Sub(t0))/1e6)
	}
	order = append(order, "total")
	for _, k := range order {
		v := phases[k]
		sort.Float64s(v)
		fmt.Printf("%-12s p50 %.3f ms  (min %.3f max %.3f)\n", k, v[len(v)/2], v[0], v[len(v)-1])
	}
}
