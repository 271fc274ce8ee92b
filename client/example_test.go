package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// Submit a job and wait for its result. In a real deployment nc points at
// the fleet's NATS and the streams exist (a scheduler created them); here a
// stand-in fleet on an embedded server plays the scheduler and the worker.
func Example() {
	fleet := startStandInFleet()
	defer fleet.stop()
	nc, err := nats.Connect(fleet.url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	c, err := client.New(nc, client.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sub, err := c.Submit(ctx, job.Spec{Command: "echo hello", Labels: map[string]string{"pipeline": "docs"}})
	if err != nil {
		panic(err)
	}
	res, err := c.Wait(ctx, sub.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.ID == sub.ID, res.State, res.Reason)
	fmt.Print(res.Stdout.Text)
	// Output:
	// true succeeded ok
	// hello
}

// Submit many jobs at once and wait for all of them.
func ExampleClient_WaitAll() {
	fleet := startStandInFleet()
	defer fleet.stop()
	nc, err := nats.Connect(fleet.url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	specs := []job.Spec{{Command: "echo a"}, {Command: "echo b"}, {Command: "echo c"}}
	subs, err := c.SubmitBatch(ctx, specs, nil)
	if err != nil {
		panic(err) // a *client.BatchError says which items failed
	}
	ids := make([]string, len(subs))
	for i, s := range subs {
		ids[i] = s.ID
	}
	all, err := c.WaitAll(ctx, ids, func(done, total int) { /* progress bar */ })
	if err != nil {
		panic(err)
	}
	for _, r := range all {
		fmt.Print(r.State, " ", r.Stdout.Text)
	}
	// Output:
	// succeeded a
	// succeeded b
	// succeeded c
}

// Connect as a tenant: its credentials, its inbox prefix, and a client of
// the same tenant. A tenant at its max-queued quota gets a *QuotaError.
func ExampleConnect() {
	ctx := context.Background()
	nc, err := client.Connect(ctx, client.ConnectConfig{
		URL:    "nats://nats.example.com:4222",
		Creds:  "/etc/paddock/ci.creds", // written by `paddock tenant add ci`
		Tenant: "ci",
	})
	if err != nil {
		panic(err) // says when the server refused the credentials, never showing them
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{Tenant: "ci"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_, err = c.Submit(ctx, job.Spec{Command: "make test"})
	var quota *client.QuotaError
	if errors.As(err, &quota) {
		fmt.Println("too many jobs queued; try again once some have finished")
	}
}

// Get reads a result without waiting.
func ExampleClient_Get() {
	fleet := startStandInFleet()
	defer fleet.stop()
	nc, err := nats.Connect(fleet.url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	_, err = c.Get(context.Background(), "no-such-job")
	fmt.Println(errors.Is(err, client.ErrNotFinished))
	// Output: true
}

// standInFleet is an embedded NATS server with Paddock's streams and a
// goroutine that "runs" each submission by echoing the command's argument
// (in its result and as its live output):
// just enough of a scheduler and a worker for the examples (the tests of
// the scheduler package run the real one).
type standInFleet struct {
	url  string
	stop func()
}

func startStandInFleet() standInFleet {
	dir, err := os.MkdirTemp("", "paddock-example-")
	if err != nil {
		panic(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := results.EnsureStreams(ctx, js, results.StreamConfig{}); err != nil {
		panic(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, job.JobsStream(job.DefaultTenant), jetstream.ConsumerConfig{Durable: "stand-in", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		panic(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		spec, err := job.Decode(m.Data())
		if err != nil {
			_ = m.Term()
			return
		}
		var arg string
		_, _ = fmt.Sscanf(spec.Command, "echo %s", &arg)
		live := nats.NewMsg(job.OutputSubject(job.DefaultTenant, spec.ID)) // its live output: one chunk
		live.Header.Set(job.HeaderOutStream, "stdout")
		live.Header.Set(job.HeaderOutSeq, "1")
		live.Header.Set(job.HeaderOutRun, "1")
		live.Data = []byte(arg + "\n")
		if _, err := js.PublishMsg(ctx, live); err != nil {
			return
		}
		r := job.Result{ID: spec.ID, Stdout: job.Output{Text: arg + "\n", Bytes: int64(len(arg) + 1)}}
		r.Finish(job.ReasonOK)
		data, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, job.ResultSubject(job.DefaultTenant, spec.ID), data); err != nil {
			return
		}
		end := nats.NewMsg(job.OutputSubject(job.DefaultTenant, spec.ID)) // the end marker, after the result
		end.Header.Set(job.HeaderOutEnd, string(job.ReasonOK))
		if _, err := js.PublishMsg(ctx, end); err == nil {
			_ = m.Ack()
		}
	})
	if err != nil {
		panic(err)
	}
	return standInFleet{url: srv.ClientURL(), stop: func() {
		cc.Stop()
		<-cc.Closed()
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}}
}
