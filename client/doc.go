// Package client is the Go SDK pipelines use to run jobs on a Paddock fleet
// (the paddock CLI uses it too). It talks only to NATS, as one tenant:
// submissions go to the tenant's JetStream stream job.JobsStream(tenant) on
// job.SubmitSubject(tenant), results are read from job.ResultsStream(tenant) on
// job.ResultSubject(tenant, id), cancels are requests on
// job.CancelRequestSubject(tenant).
//
//	nc, _ := client.Connect(ctx, client.ConnectConfig{URL: url, Creds: "ci.creds", Tenant: "ci"})
//	c, _ := client.New(nc, client.Config{Tenant: "ci"})
//	sub, err := c.Submit(ctx, job.Spec{Command: "go test ./..."})
//	res, err := c.Wait(ctx, sub.ID)
//
// A fleet without authentication has one tenant, job.DefaultTenant, which a
// zero Config and ConnectConfig use. With authentication the NATS server
// keeps tenants apart: a tenant's credentials (package tenant) allow only
// its own submit and cancel subjects, direct gets of its own results, and
// subscriptions to its own results, output and inbox (job.InboxPrefix,
// which Connect sets), and the reading of its own live output stream and
// output bucket and the writing of its input bucket. Submitting, waiting
// and cancelling need nothing more: they never ask for stream information
// and never create a consumer. A request the server refuses fails at once
// with a *PermissionError (errors.Is ErrPermission), not at its deadline.
//
// Agent I/O (io.go): Follow yields a job's live output as it runs (direct
// gets of the tenant's output stream, job.OutputStream; no consumer), and
// CopyFollow writes it to a stdout and a stderr with a marker at each gap
// (copyfollow.go); Output streams the complete stdout or stderr a job
// kept, Artifacts and Artifact the files it left (the tenant's output
// bucket, job.OutBucket); Put uploads a file for jobs to name by reference
// (job.InBucket), and PutFile a local file under its default ref.
// AttachFiles puts local files in a spec, inline while they are small and
// uploaded by PutFile otherwise (attach.go).
//
// Every submission carries a job id (assigned by NewID when the spec has
// none) that is also its Nats-Msg-Id, so submitting the same spec again, or
// retrying after an unconfirmed publish, runs it once; ids are the
// tenant's own, so two tenants may use the same one. Submit returns once
// JetStream has stored the submission: it survives a scheduler restart.
// When the tenant has as many jobs waiting or running as its max-queued
// quota allows, Submit returns a *QuotaError (errors.Is ErrQuota); when the
// stream is full by size, an error matching ErrStreamFull. Neither stores
// anything.
//
// Get reads a job's last result with a JetStream direct get. Wait and
// WaitAll return a job's terminal result whether it finished before or
// after the call: they subscribe to the tenant's results first, then look
// each id up with direct gets (a bounded number in flight), and look the
// pending ids up again after a NATS reconnect, so they miss no result and
// need no consumer.
package client
