package broker_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

// benchSetup is a setup whose grants' rates do not limit a benchmark.
func benchSetup(b *testing.B) *setup {
	s := newSetup(b)
	unlimited := strings.NewReplacer(
		`"rate": {"per_second": 1000, "burst": 1000}`, `"rate": {"per_second": 1000000, "burst": 1000000}`,
		`"token": {"audience": "inventory", "ttl": "10m"},`, `"token": {"audience": "inventory", "ttl": "10m"}, "rate": {"per_second": 1000000, "burst": 1000000},`,
	).Replace(strings.ReplaceAll(testPolicy, "UPSTREAM", s.up.srv.URL))
	p, err := broker.ParsePolicy([]byte(unlimited))
	require.NoError(b, err)
	require.NoError(b, s.b.SetPolicy(p))
	return s
}

// BenchmarkCall is one granted GET through the broker (box → unix socket →
// broker → TLS upstream on loopback, connections kept alive).
func BenchmarkCall(b *testing.B) {
	s := benchSetup(b)
	bx := s.serve(acmeJob())
	for b.Loop() {
		resp, err := bx.client.Get("http://svc/items")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}

// BenchmarkDirect is the same GET straight to the upstream, for comparison.
func BenchmarkDirect(b *testing.B) {
	s := benchSetup(b)
	c := s.up.srv.Client()
	for b.Loop() {
		resp, err := c.Get(s.up.srv.URL + "/api/items")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkTokenCall is a GET of a grant with a scoped token (minted per
// call).
func BenchmarkTokenCall(b *testing.B) {
	s := benchSetup(b)
	bx := s.serve(acmeJob())
	for b.Loop() {
		resp, err := bx.client.Get("http://tok/items")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
