package fleettest

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/paddockhq/paddock/sandbox"
)

// boxes lists the containers of the workers whose ids start with
// ownerPrefix, running or not: id → owner.
func boxes(ctx context.Context, d *client.Client, ownerPrefix string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := d.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", sandbox.LabelOwner)})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list.Items {
		if o := c.Labels[sandbox.LabelOwner]; strings.HasPrefix(o, ownerPrefix) {
			out[c.ID] = o
		}
	}
	return out, nil
}

// jobMarker finds the job id in a box's process list (spec names it).
var jobMarker = regexp.MustCompile(`fj-[0-9]{5}`)

// boxJobs lists the jobs whose command (matching re) runs in a box of
// owner, from the engine's process lists.
func boxJobs(ctx context.Context, d *client.Client, owner string, re *regexp.Regexp) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := d.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range list.Items {
		top, err := d.ContainerTop(ctx, c.ID, client.ContainerTopOptions{})
		if err != nil {
			continue
		}
		for _, p := range top.Processes {
			line := strings.Join(p, " ")
			if id := jobMarker.FindString(line); id != "" && re.MatchString(line) && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// busyBoxes counts owner's running containers with a process besides
// paddock-init: the boxes running a job (a warm box runs init alone).
func busyBoxes(ctx context.Context, d *client.Client, owner string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := d.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", sandbox.LabelOwner+"="+owner)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range list.Items {
		top, err := d.ContainerTop(ctx, c.ID, client.ContainerTopOptions{})
		if err == nil && len(top.Processes) > 1 {
			n++
		}
	}
	return n, nil
}

// removeBoxes force-removes the containers of the workers whose ids start
// with ownerPrefix and returns how many it found.
func removeBoxes(ctx context.Context, d *client.Client, ownerPrefix string) (int, error) {
	ids, err := boxes(ctx, d, ownerPrefix)
	if err != nil {
		return 0, err
	}
	for id := range ids {
		_, err := d.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			return len(ids), err
		}
	}
	return len(ids), nil
}
