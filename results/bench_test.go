package results_test

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkRecord is one terminal result: SET NX in Redis (the test server
// fsyncs every write) and a JetStream publish.
func BenchmarkRecord(b *testing.B) {
	s := newSetup(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := s.store.Record(ctx, okResult("b-"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
}
