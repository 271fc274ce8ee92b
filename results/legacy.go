package results

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// legacyResultsSubject is the subject the results stream of older versions
// (job.StreamResults) takes while MigrateLegacyResults empties it: the
// tenants' streams need its old subjects, paddock.results.>, and a stored
// message keeps its own subject whatever the stream's are.
const legacyResultsSubject = "paddock.legacy-results"

// MigrateLegacyResults moves the results of the one results stream every
// tenant shared before (job.StreamResults), if it exists, into each
// tenant's own results stream (ResultsStreamConfig, made when missing),
// then deletes it. It returns how many results it moved. Each result keeps
// its headers (its Nats-Msg-Id among them), and a tenant's stream keeps one
// message per job, so a migration that stops half-way, or runs in two
// schedulers at once, moves nothing twice. Redis holds every result
// meanwhile; a result published by a worker while the tenant's stream is
// missing is republished (Republisher).
func MigrateLegacyResults(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (int, error) {
	st, err := js.Stream(ctx, job.StreamResults)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("results: legacy stream %s: %w", job.StreamResults, err)
	}
	if c := st.CachedInfo().Config; !slices.Equal(c.Subjects, []string{legacyResultsSubject}) {
		c.Subjects = []string{legacyResultsSubject}
		if _, err := js.UpdateStream(ctx, c); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, fmt.Errorf("results: free the subjects of %s: %w", job.StreamResults, err)
		}
	}
	moved, err := moveLegacyResults(ctx, js, cfg)
	if err != nil {
		return moved, err
	}
	if err := js.DeleteStream(ctx, job.StreamResults); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return moved, fmt.Errorf("results: delete %s after moving %d results: %w", job.StreamResults, moved, err)
	}
	return moved, nil
}

// moveLegacyResults copies every message of the legacy stream to its
// tenant's results stream.
func moveLegacyResults(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (int, error) {
	cons, err := js.OrderedConsumer(ctx, job.StreamResults, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil // another scheduler finished the migration
	}
	if err != nil {
		return 0, fmt.Errorf("results: read %s: %w", job.StreamResults, err)
	}
	made := map[string]bool{}
	moved := 0
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return moved, fmt.Errorf("results: read %s: %w", job.StreamResults, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if err := moveLegacyResult(ctx, js, cfg, m, made); err != nil {
				return moved, err
			}
			moved++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return moved, fmt.Errorf("results: read %s: %w", job.StreamResults, err)
		}
		if n == 0 {
			return moved, nil
		}
	}
}

// moveLegacyResult publishes one legacy result into its tenant's stream,
// made first when this migration has not made it yet.
func moveLegacyResult(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, m jetstream.Msg, made map[string]bool) error {
	tenant, _, ok := job.ParseResultSubject(m.Subject())
	if !ok {
		return nil // not a result: nothing to keep
	}
	if !made[tenant] {
		sc, err := ResultsStreamConfig(cfg, tenant)
		if err != nil {
			return err
		}
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
		made[tenant] = true
	}
	msg := nats.NewMsg(m.Subject())
	msg.Data = m.Data()
	for k, v := range m.Headers() {
		if !strings.HasPrefix(k, "Nats-Expected") { // it named the old stream
			msg.Header[k] = v
		}
	}
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(job.ResultsStream(tenant))); err != nil {
		return fmt.Errorf("results: move %s into %s: %w", m.Subject(), job.ResultsStream(tenant), err)
	}
	return nil
}
