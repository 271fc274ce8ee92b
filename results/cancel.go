package results

import (
	"context"
	"fmt"

	"github.com/paddockhq/paddock/job"
)

// Cancel marks the job canceled (the flag expires after the retention) and
// sends a best-effort empty message on job.CancelSubject(key) so that a
// worker running the job can stop it. Whoever next handles the job (the
// scheduler before enqueueing, the worker before running) records the
// canceled result.
func (s *Store) Cancel(ctx context.Context, key string) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.rdb.Set(ctx, s.key("cancel", key), "1", s.cfg.Retention).Err(); err != nil {
		return fmt.Errorf("results: cancel %s: %w", key, err)
	}
	nc := s.js.Conn()
	err := nc.Publish(job.CancelSubject(key), nil)
	if err == nil {
		err = nc.FlushWithContext(ctx)
	}
	if err != nil {
		s.log.Warn("cancel notification not sent; the flag is set", "job", key, "err", err)
	}
	return nil
}

// Canceled reports whether Cancel was called for key within the retention.
func (s *Store) Canceled(ctx context.Context, key string) (bool, error) {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	n, err := s.rdb.Exists(ctx, s.key("cancel", key)).Result()
	if err != nil {
		return false, fmt.Errorf("results: canceled %s: %w", key, err)
	}
	return n == 1, nil
}
