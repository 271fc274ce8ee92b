package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/internal/retrydelay"
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

// streamsWait bounds how long a starting service retries a JetStream that
// does not answer yet (a cluster electing its leaders, a node restarting
// in a rolling upgrade) before it gives up.
var streamsWait = 2 * time.Minute

// streamsTry bounds one try: a JetStream without a meta leader does not
// answer at all, and a request under a long deadline would wait it out.
var streamsTry = 15 * time.Second

// ensureFleetStreams makes the default tenant's streams and the registry
// and tokens buckets at cfg.Replicas, or moves existing ones to it. A
// JetStream that does not answer yet is retried with backoff for up to
// streamsWait, each try logged, so that services started together with
// their NATS cluster wait for it instead of exiting; a refusal (a config
// that cannot apply, a permission) fails at once.
func ensureFleetStreams(ctx context.Context, js jetstream.JetStream, cfg results.StreamConfig, log *slog.Logger) error {
	giveUp := time.Now().Add(streamsWait)
	for n := uint64(1); ; n++ {
		tctx, cancel := context.WithTimeout(ctx, streamsTry)
		err := ensureFleetStreamsOnce(tctx, js, cfg)
		cancel()
		if err == nil || !transientJS(err) || ctx.Err() != nil || time.Now().After(giveUp) {
			return err
		}
		d := retrydelay.Nth(n, 500*time.Millisecond, 8*time.Second, 0.2)
		log.Warn("JetStream did not answer while making the fleet's streams; retrying (a NATS cluster still electing leaders, or a node down)",
			"err", err, "attempt", n, "retry_in", d.Round(time.Millisecond), "gives_up_in", time.Until(giveUp).Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

func ensureFleetStreamsOnce(ctx context.Context, js jetstream.JetStream, cfg results.StreamConfig) error {
	if err := results.EnsureStreams(ctx, js, cfg); err != nil {
		return fmt.Errorf("create JetStream streams: %w", replicasHint(err, cfg.Replicas))
	}
	if err := tenant.EnsureBuckets(ctx, js, cfg.Replicas); err != nil {
		return replicasHint(err, cfg.Replicas)
	}
	return nil
}

// transientJS tells whether err is JetStream not answering yet rather
// than refusing: a timeout, no responders, or the cluster's "temporarily
// unavailable" and "no suitable peers" (servers still joining).
func transientJS(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jsClusterNotAvailable || apiErr.ErrorCode == jsClusterNoPeers
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
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
// jsClusterNotAvailable is "JetStream system temporarily unavailable"
// (JSClusterNotAvailErr: no meta leader yet); jsClusterNoPeers is "no
// suitable peers for placement" (JSClusterNoPeersErr: too few servers
// joined yet, or ever).
const (
	jsReplicasNotSupported  jetstream.ErrorCode = 10074
	jsInsufficientResources jetstream.ErrorCode = 10023
	jsClusterNotAvailable   jetstream.ErrorCode = 10008
	jsClusterNoPeers        jetstream.ErrorCode = 10005
)
