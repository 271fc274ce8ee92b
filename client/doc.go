// Package client is the Go SDK pipelines use to run jobs on a Paddock fleet
// (the paddock CLI uses it too). It talks only to NATS: submissions go to
// the JetStream stream job.StreamJobs, results are read from
// job.StreamResults.
//
//	c, _ := client.New(nc, client.Config{})
//	sub, err := c.Submit(ctx, job.Spec{Command: "go test ./..."})
//	res, err := c.Wait(ctx, sub.ID)
//
// Every submission carries a job id (assigned by NewID when the spec has
// none) that is also its Nats-Msg-Id, so submitting the same spec again, or
// retrying after an unconfirmed publish, runs it once. Submit returns once
// JetStream has stored the submission: it survives a scheduler restart.
// When the fleet's backlog has filled job.StreamJobs, Submit returns an
// error matching ErrStreamFull and stores nothing.
//
// Wait and WaitAll return a job's terminal result whether it finished before
// or after the call; they read the last result per job with ordered
// consumers (one per 1000 ids), so they neither poll nor miss a result
// across a NATS reconnect.
package client
