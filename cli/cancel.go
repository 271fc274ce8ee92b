package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
)

func cancelCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "cancel ID...",
		Short: "Cancel jobs: remove a queued job, or kill a running one's container (the result says canceled)",
		Long: `cancel asks a scheduler to cancel each job and prints what happened:
  canceled  the job was waiting in the queue; it was removed and never runs
  killing   the job is running; its worker kills the container and records canceled
  finished  the job had already ended (its state is printed); nothing changed
  flagged   the job is not in the queue yet (or the id is unknown); it ends
            canceled as soon as a scheduler or worker reaches it
With -o json each reply is one JSON line: {"id", "outcome", "state", "reason",
"message"}, or {"id", "error"} for a cancel that could not be carried out.
Exit status 1 when a cancel could not be carried out (retrying is safe).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			ctx := cmd.Context()
			nc, tn, err := g.connectClient(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, client.Config{Logger: g.logger, PublishTimeout: timeout, Tenant: tn})
			if err != nil {
				return err
			}
			defer c.Close()
			failed := 0
			enc := json.NewEncoder(g.stdout)
			for _, id := range ids {
				r, err := c.Cancel(ctx, id)
				if err != nil {
					failed++
					fmt.Fprintf(g.stderr, "%s: not canceled: %v\n", id, err)
					if output == "json" {
						if err := enc.Encode(job.CancelReply{ID: id, Error: err.Error()}); err != nil {
							return err
						}
					}
					if errors.Is(err, client.ErrNoCanceler) {
						break
					}
					continue
				}
				if output == "json" {
					err = enc.Encode(r)
				} else {
					_, err = fmt.Fprintf(g.stdout, "%s\t%s\t%s\n", r.ID, r.Outcome, r.Message)
				}
				if err != nil {
					return err
				}
			}
			if failed > 0 {
				return &exitCodeError{exitFailure}
			}
			return nil
		},
	}
	cmd.Flags().Var(newSecondsValue(&timeout, 10*time.Second), "timeout", "give up on a cancel request after this long (a bare number is seconds)")
	scopeEnv(cmd.Flags(), "timeout") // PADDOCK_CANCEL_TIMEOUT: submit --timeout is a job limit
	addOutputFlag(cmd, &output)
	return cmd
}

// startCanceler answers cancel requests next to a scheduler (any number of
// schedulers share them through a queue group).
func startCanceler(ctx context.Context, s *stack, cf *capsFlags, log *slog.Logger) (*scheduler.Canceler, error) {
	insp := asynq.NewInspectorFromRedisClient(s.rdb)
	c, err := scheduler.NewCanceler(s.nc, insp, s.st, scheduler.CancelerConfig{Queues: cf.caps().Queues, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("cancel responder on %s: %w", job.SubjectCancelRequests, err)
	}
	return c, nil
}
