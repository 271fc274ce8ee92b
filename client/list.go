package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/paddockhq/paddock/job"
)

// ErrNoLister: no scheduler answers list requests (none runs, or they
// predate the job list).
var ErrNoLister = errors.New("client: no scheduler answers job list requests: start one (`paddock up` or `paddock scheduler`), of this version or later")

// List returns one page of the tenant's jobs, newest (queued) first, that
// match q's filters (q.Tenant is ignored: the fleet lists the client's
// tenant only). Pass the page's NextCursor as q.Cursor for the next page;
// a page may be short, even empty, and still have one. It is a request on
// job.JobsRequestSubject(tenant); an invalid query is a
// *job.ValidationError. Without a ctx deadline, PublishTimeout applies.
func (c *Client) List(ctx context.Context, q job.ListQuery) (job.ListPage, error) {
	q.Tenant = ""
	if err := q.Check(); err != nil {
		return job.ListPage{}, err
	}
	return c.listRequest(ctx, job.ListRequest{ListQuery: q})
}

// Changes returns the tenant's job summaries updated at or after since, by
// the fleet's clock (Summary.UpdatedAt), oldest change first: at most limit
// (job.DefaultListLimit when 0, at most job.MaxListLimit) plus any changed
// in the same instant as the last. To follow the list, call it again with
// the last summary's UpdatedAt: a summary may then come again.
func (c *Client) Changes(ctx context.Context, since time.Time, limit int) ([]job.Summary, error) {
	if limit < 0 || limit > job.MaxListLimit {
		return nil, &job.ValidationError{Fields: []job.FieldError{{Field: "limit", Message: "must be 0 to 200"}}}
	}
	page, err := c.listRequest(ctx, job.ListRequest{Changes: &job.ChangesQuery{Since: since, Limit: limit}})
	return page.Jobs, err
}

func (c *Client) listRequest(ctx context.Context, req job.ListRequest) (job.ListPage, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	data, err := json.Marshal(req)
	if err != nil {
		return job.ListPage{}, err
	}
	body, err := c.askService(ctx, job.JobsRequestSubject(c.tenant), data, "list jobs", ErrNoLister)
	if err != nil {
		return job.ListPage{}, err
	}
	var reply job.ListReply
	if err := json.Unmarshal(body, &reply); err != nil {
		return job.ListPage{}, fmt.Errorf("client: list jobs: malformed reply: %w", err)
	}
	if len(reply.Fields) > 0 {
		return job.ListPage{}, &job.ValidationError{Fields: reply.Fields}
	}
	if reply.Error != "" {
		return job.ListPage{}, fmt.Errorf("client: list jobs: %s", reply.Error)
	}
	if reply.Jobs == nil {
		reply.Jobs = []job.Summary{}
	}
	return reply.ListPage, nil
}
