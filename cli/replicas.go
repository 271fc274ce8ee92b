package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/tenant"
)

// replicasFlag is the flag (and PADDOCK_REPLICAS) of every command that
// creates JetStream streams, KV or Object Store buckets: scheduler,
// worker, up, gateway and the tenant commands.
const replicasFlag = "replicas"

// registerReplicas adds --replicas to fs, into g.replicas.
func registerReplicas(fs *pflag.FlagSet, g *globals) {
	fs.IntVar(&g.replicas, replicasFlag, 0, "JetStream replicas of every stream and bucket this command creates: 1, 3 or 5 (a NATS cluster of at least that many JetStream servers); "+
		"an existing stream or bucket is moved to it at start. Unset: new ones get 1, existing ones keep theirs")
}

// ErrReplicas is wrapped by a --replicas the fleet cannot use.
var ErrReplicas = errors.New("--replicas: want 1, 3 or 5")

// checkReplicas refuses a --replicas (given, or from PADDOCK_REPLICAS)
// other than 1, 3 or 5: JetStream's Raft groups want an odd size, and 5 is
// the largest it supports.
func checkReplicas(cmd *cobra.Command, n int) error {
	f := cmd.Flags().Lookup(replicasFlag)
	if f == nil || !f.Changed {
		return nil
	}
	switch n {
	case 1, 3, 5:
		return nil
	}
	return fmt.Errorf("%w, not %d (an odd count keeps a Raft majority; JetStream supports at most 5)", ErrReplicas, n)
}

// ensureFleetStreams makes the default tenant's streams and the registry
// and tokens buckets at cfg.Replicas, or moves existing ones to it.
func ensureFleetStreams(ctx context.Context, js jetstream.JetStream, cfg results.StreamConfig) error {
	if err := results.EnsureStreams(ctx, js, cfg); err != nil {
		return fmt.Errorf("create JetStream streams: %w", replicasHint(err, cfg.Replicas))
	}
	if err := tenant.EnsureBuckets(ctx, js, cfg.Replicas); err != nil {
		return replicasHint(err, cfg.Replicas)
	}
	return nil
}

// replicasHint explains a JetStream refusal of the asked replicas.
func replicasHint(err error, n int) error {
	if n <= 1 {
		return err
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsReplicasNotSupported || apiErr.ErrorCode == jsInsufficientResources) {
		return fmt.Errorf("%w (--replicas %d needs a NATS cluster with at least %d JetStream servers)", err, n, n)
	}
	return err
}

// jsReplicasNotSupported is JetStream's "replicas > 1 not supported in
// non-clustered mode" (JSStreamReplicasNotSupportedErr);
// jsInsufficientResources is JetStream's "insufficient resources"
// (JSInsufficientResourcesErr: fewer servers than replicas).
const (
	jsReplicasNotSupported  jetstream.ErrorCode = 10074
	jsInsufficientResources jetstream.ErrorCode = 10023
)
