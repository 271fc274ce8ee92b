package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox"
)

func TestExplore(t *testing.T) {
	d, _ := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	rt, err := sandbox.New(d, sandbox.Config{Owner: "explore", InitPath: "/tmp/pinit/paddock-init", PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer rt.Stop()
	for _, cpus := range []float64{0.5, 2} {
		s, err := rt.Acquire(context.Background(), sandbox.Profile{Image: "paddock/test:latest", CPUs: cpus}, sandbox.SessionOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []sandbox.Command{
			{Argv: []string{"/bin/true"}}, {Argv: []string{"bash", "-c", "echo hi"}}, {Argv: []string{"sh", "-c", "echo hi"}}, {Script: "echo hi"},
			{Argv: []string{"bash", "--norc", "--noprofile", "-c", "echo hi"}},
		} {
			var wall, in []time.Duration
			for range 20 {
				t0 := time.Now()
				out, err := s.Run(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				wall = append(wall, time.Since(t0))
				in = append(in, out.Duration)
			}
			fmt.Printf("cpus %.1f %v: wall p50 %v  in-container p50 %v\n", cpus, c.Argv, med(wall), med(in))
		}
		s.Close()
	}
}

func TestExploreFirst(t *testing.T) {
	d, _ := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	rt, err := sandbox.New(d, sandbox.Config{Owner: "explore", InitPath: "/tmp/pinit/paddock-init", PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	rt.Start(context.Background())
	defer rt.Stop()
	for _, c := range []sandbox.Command{{Script: "echo hi"}, {Argv: []string{"/bin/true"}}, {Argv: []string{"sh", "-c", "echo hi"}}} {
		var w [3][]time.Duration
		var in [3][]time.Duration
		for range 8 {
			s, err := rt.Acquire(context.Background(), sandbox.Profile{Image: "paddock/test:latest"}, sandbox.SessionOptions{})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			for i := range 3 {
				t0 := time.Now()
				out, err := s.Run(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				w[i] = append(w[i], time.Since(t0))
				in[i] = append(in[i], out.Duration)
			}
			s.Close()
		}
		for i := range 3 {
			fmt.Printf("%v %q cmd#%d: wall p50 %v in-container p50 %v\n", c.Argv, c.Script, i+1, med(w[i]), med(in[i]))
		}
	}
}

func med(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
