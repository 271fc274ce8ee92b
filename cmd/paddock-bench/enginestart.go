package main

import (
	"context"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// engineStartScenario is the rate at which the engine hands out fresh
// containers at all: API create + start of a container configured as
// Paddock's default profile, running `sh -c 'echo hi'` (no attach: the
// output is not read, so it is not checked either). Removal is off the
// clock and off the critical path, as Paddock does it: a background remover
// takes each started container, waits for it to exit and removes it; settle
// waits for the remover, so every measured job meets an engine with no
// removal in flight, like the other scenarios.
func engineStartScenario(d *client.Client, image, runID string) *scenario {
	rm := &remover{d: d, ids: make(chan string, 1024)}
	rm.wg.Add(1)
	go rm.loop()
	return &scenario{
		name: "engine_start",
		desc: "API create + start per command (no attach, no wait), Paddock's container config; removal in the background",
		job: func(ctx context.Context, rec *steps) error {
			c, err := d.ContainerCreate(ctx, client.ContainerCreateOptions{
				Config: &container.Config{Image: image, Cmd: []string{"sh", "-c", "echo hi"}, User: "1000:1000",
					Labels: map[string]string{labelBench: runID}},
				HostConfig: cappedHostConfig(),
			})
			rec.mark("create")
			if err != nil {
				return err
			}
			_, err = d.ContainerStart(ctx, c.ID, client.ContainerStartOptions{})
			rec.mark("start")
			rm.add(c.ID) // after the start: a removal must not race it
			return err
		},
		settle: rm.settle,
		close:  rm.close,
	}
}

// remover removes the started containers one at a time in the background.
type remover struct {
	d       *client.Client
	ids     chan string
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending int
	once    sync.Once
}

func (r *remover) add(id string) {
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
	r.ids <- id
}

func (r *remover) loop() {
	defer r.wg.Done()
	for id := range r.ids {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = r.d.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		cancel()
		r.mu.Lock()
		r.pending--
		r.mu.Unlock()
	}
}

// settle waits until every container handed to the remover is removed.
func (r *remover) settle(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := r.pending
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (r *remover) close() {
	r.once.Do(func() { close(r.ids) })
	r.wg.Wait()
}
