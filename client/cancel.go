package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/paddockhq/paddock/job"
)

// ErrNoCanceler: no scheduler answers cancel requests (none runs, or they
// predate cancel support).
var ErrNoCanceler = errors.New("client: no scheduler answers cancel requests: start one (`paddock up` or `paddock scheduler`)")

// Cancel cancels the tenant's job id: a job waiting in the queue is
// removed and ends `canceled`; a running job's container is killed and it
// ends `canceled`; a finished job is left as it is (the reply says how it
// ended); a job not yet scheduled, or an unknown id, is flagged so that it
// ends `canceled` when it is reached. The reply's Outcome says which. Cancel
// is idempotent; an error means the request may not have been carried out
// and retrying is safe. It is a request on job.CancelRequestSubject(tenant).
// Without a ctx deadline, PublishTimeout applies.
func (c *Client) Cancel(ctx context.Context, id string) (job.CancelReply, error) {
	if err := job.CheckID(id); err != nil {
		return job.CancelReply{}, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	data, err := json.Marshal(job.CancelRequest{ID: id})
	if err != nil {
		return job.CancelReply{}, err
	}
	body, err := c.askService(ctx, job.CancelRequestSubject(c.tenant), data, "cancel "+id,
		fmt.Errorf("%w (%s)", ErrNoCanceler, id))
	if err != nil {
		return job.CancelReply{}, err
	}
	var reply job.CancelReply
	if err := json.Unmarshal(body, &reply); err != nil {
		return job.CancelReply{}, fmt.Errorf("client: cancel %s: malformed reply: %w", id, err)
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("client: cancel %s: %s", id, reply.Error)
	}
	return reply, nil
}
