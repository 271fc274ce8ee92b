package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// CopyFollow writes stdout to stdout, stderr to stderr, and a marker on a
// line of its own at each gap: a chunk that expired, skipped bytes, a new
// run.
func TestCopyFollow(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, ch := range []client.Chunk{
		{Stream: "stdout", Data: []byte("a\n"), Seq: 1, Run: 1},
		{Stream: "stderr", Data: []byte("warn"), Seq: 2, Run: 1},
		{Stream: "stdout", Data: []byte("b\n"), Seq: 4, Run: 1, Skipped: 7}, // seq 3 expired
		{Stream: "stderr", Data: []byte("x\n"), Seq: 1, Run: 2},
		{Stream: "stdout", Data: []byte("c\n"), Seq: 2, Run: 2},
	} {
		f.chunk("ta", "cf", ch)
	}

	var out, errw bytes.Buffer
	n, err := c.CopyFollow(ctx, "cf", &out, &errw, client.NoWait())
	require.NoError(t, err)
	assert.Equal(t, client.FollowCopy{Chunks: 5}, n, "NoWait ends before the end marker")
	assert.Equal(t, "a\nb\nc\n", out.String(), "stdout is the job's stdout, nothing else")
	assert.Equal(t, "warn\n[… 1 chunks of run 1 are no longer in the live stream]\n[… 7 bytes skipped on stdout]\n"+
		"[— run 2 of the job —]\nx\n", errw.String())

	f.chunk("ta", "cf", client.Chunk{End: true, Reason: job.ReasonExitNonzero})
	out.Reset()
	errw.Reset()
	n, err = c.CopyFollow(ctx, "cf", &out, &errw)
	require.NoError(t, err)
	assert.Equal(t, client.FollowCopy{Chunks: 5, End: true, Reason: job.ReasonExitNonzero}, n)
	assert.Equal(t, "a\nb\nc\n", out.String())
	assert.Empty(t, errs.list())
}

// failWriter fails its writes after ok of them.
type failWriter struct{ ok int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.ok == 0 {
		return 0, errors.New("disk full")
	}
	w.ok--
	return len(p), nil
}

// CopyFollow stops at Follow's error or a failed write, saying how many
// chunks it wrote.
func TestCopyFollowErrors(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, _ := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var out, errw bytes.Buffer
	n, err := c.CopyFollow(ctx, "none", &out, &errw, client.NoWait())
	require.ErrorIs(t, err, client.ErrNoLiveOutput)
	assert.Zero(t, n)

	for seq := 1; seq <= 3; seq++ {
		f.chunk("ta", "w", client.Chunk{Stream: "stdout", Data: []byte("line\n"), Seq: seq, Run: 1})
	}
	n, err = c.CopyFollow(ctx, "w", &failWriter{ok: 2}, &errw, client.NoWait())
	assert.EqualError(t, err, "disk full")
	assert.Equal(t, client.FollowCopy{Chunks: 2}, n)

	f.finish("ta", job.Result{ID: "w"}) // the end marker never comes
	start := time.Now()
	n, err = c.CopyFollow(ctx, "w", &out, &errw)
	require.ErrorIs(t, err, client.ErrNoLiveOutput)
	assert.Equal(t, client.FollowCopy{Chunks: 3}, n)
	assert.Less(t, time.Since(start), 10*time.Second)
}

// Print a job's output live as it runs, then its result: what a terminal
// shows for `paddock submit --follow`.
func ExampleClient_CopyFollow() {
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

	sub, err := c.Submit(ctx, job.Spec{Command: "echo hello"})
	if err != nil {
		panic(err)
	}
	n, err := c.CopyFollow(ctx, sub.ID, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, client.ErrNoLiveOutput) && n.Chunks == 0:
		// Nothing live (it expired): Output has the kept output, if any.
	case err != nil:
		panic(err)
	}
	res, err := c.Wait(ctx, sub.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("ended:", n.End, n.Reason, "result:", res.State)
	// Output:
	// hello
	// ended: true ok result: succeeded
}
