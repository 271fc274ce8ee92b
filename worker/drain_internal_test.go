package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A task asynq hands over once the drain has begun never reaches the
// handler: drainable holds it until asynq's shutdown ends its context (so
// asynq re-queues it, no retry counted) and returns errDraining. Before the
// drain, the same middleware runs the handler.
func TestDrainableHoldsATaskHandedOverAsTheDrainBegins(t *testing.T) {
	w := &Worker{cfg: Config{ShutdownTimeout: time.Minute}, log: slog.New(slog.DiscardHandler)}
	w.drain.reset()
	ran := 0
	h := w.drainable(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran++
		return nil
	}))
	task := asynq.NewTask("paddock:job", nil)

	require.NoError(t, h.ProcessTask(context.Background(), task))
	require.Equal(t, 1, ran, "before the drain the handler runs")

	w.drain.begin(time.Hour)
	ctx, shutdown := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ProcessTask(ctx, task) }()
	select {
	case err := <-done:
		t.Fatalf("the task was let go before asynq's shutdown (%v): asynq would count a retry", err)
	case <-time.After(200 * time.Millisecond): // still held
	}
	shutdown() // asynq's shutdown re-queues the task and ends its context
	select {
	case err := <-done:
		assert.ErrorIs(t, err, errDraining)
	case <-time.After(10 * time.Second):
		t.Fatal("the held task did not end with its context")
	}
	assert.Equal(t, 1, ran, "a task handed over during the drain ran")
}
