package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/paddockhq/paddock/job"
)

// apiDirectGet(tenant) + subject asks PADDOCK_RESULTS_<tenant> (AllowDirect) for the last
// message on subject: JetStream's "direct get last by subject", the one
// JetStream API a tenant may call (on its own results only). The request
// has an empty body; the reply is the stored message with its headers, or
// a status-only "404 Message Not Found". The stream is the tenant's own
// (job.ResultsStream).
func apiDirectGet(tenant string) string {
	return "$JS.API.DIRECT.GET." + job.ResultsStream(tenant) + "."
}

// Get returns the terminal result of the tenant's job id, or an error
// wrapping ErrNotFinished when there is none (yet). It reads the last
// message on job.ResultSubject(tenant, id) with a direct get (any stream
// replica answers). Without a ctx deadline, PublishTimeout applies.
func (c *Client) Get(ctx context.Context, id string) (job.Result, error) {
	if err := job.CheckID(id); err != nil {
		return job.Result{}, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	r, ok, err := c.lookup(ctx, id)
	if err != nil {
		return job.Result{}, err
	}
	if !ok {
		return job.Result{}, fmt.Errorf("%w: %s", ErrNotFinished, id)
	}
	return r, nil
}

// lookup reads the last result of id; ok is false when there is none. ctx
// must have a deadline.
func (c *Client) lookup(ctx context.Context, id string) (r job.Result, ok bool, err error) {
	api := apiDirectGet(c.tenant)
	msg := &nats.Msg{Subject: api + job.ResultSubject(c.tenant, id)}
	reply, err := c.request(ctx, msg, api+job.SubjectResultPrefix+c.tenant+".")
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// Nobody serves direct gets of the stream: it does not exist.
		return job.Result{}, false, &NoStreamError{Stream: job.ResultsStream(c.tenant), Tenant: c.tenant, Err: err}
	case errors.Is(err, ErrPermission):
		return job.Result{}, false, err
	case err != nil:
		return job.Result{}, false, fmt.Errorf("client: get %s: %w", id, err)
	}
	if status := reply.Header.Get("Status"); len(reply.Data) == 0 && status != "" {
		if status == "404" {
			return job.Result{}, false, nil
		}
		return job.Result{}, false, fmt.Errorf("client: get %s: JetStream answered %s %s", id, status, reply.Header.Get("Description"))
	}
	r, err = decodeResult(c.tenant, id, reply.Data)
	return r, err == nil, err
}

// decodeResult decodes a result read on tenant's subject. The subject,
// which only the fleet may publish on, names the tenant: Result.Tenant is
// set from it.
func decodeResult(tenant, id string, data []byte) (job.Result, error) {
	var r job.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return job.Result{}, fmt.Errorf("client: result of %s is not valid JSON: %w", id, err)
	}
	r.Tenant = tenant
	return r, nil
}
