package client_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// BenchmarkSubmit is one synchronous submission (publish + PubAck).
func BenchmarkSubmit(b *testing.B) {
	s := newSetup(b, true, client.Config{})
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.client.Submit(ctx, job.Spec{Command: "echo hi"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubmitBatch is b.N submissions through the async window.
func BenchmarkSubmitBatch(b *testing.B) {
	s := newSetup(b, true, client.Config{})
	specs := make([]job.Spec, b.N)
	for i := range specs {
		specs[i] = job.Spec{Command: "echo " + strconv.Itoa(i)}
	}
	b.ResetTimer()
	if _, err := s.client.SubmitBatch(context.Background(), specs, nil); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWait is Wait on a job that has finished (subscribe, flush, one
// direct get, unsubscribe).
func BenchmarkWait(b *testing.B) {
	s := newSetup(b, true, client.Config{})
	s.finish("bw-1", job.ReasonOK)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.client.Wait(ctx, "bw-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet is a direct get of a stored result (publish, flush, reply).
func BenchmarkGet(b *testing.B) {
	s := newSetup(b, true, client.Config{})
	s.finish("bg-1", job.ReasonOK)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.client.Get(ctx, "bg-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWaitAll is WaitAll of 10,000 finished jobs (one subscription,
// 10,000 direct gets, lookupsInFlight at a time).
func BenchmarkWaitAll(b *testing.B) {
	s := newSetup(b, true, client.Config{})
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = "bwa-" + strconv.Itoa(i)
		s.finish(ids[i], job.ReasonOK)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := s.client.WaitAll(ctx, ids, nil); err != nil {
			b.Fatal(err)
		}
	}
}
