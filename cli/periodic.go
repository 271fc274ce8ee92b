package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/scheduler"
)

// periodicFlags is the scheduler's --schedule-file (docs/scheduling.md).
type periodicFlags struct{ file string }

func (p *periodicFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&p.file, "schedule-file", "", `periodic jobs, one JSON object per line: {"name": "nightly", "cron": "0 3 * * *", "spec": {"command": "make"}}; give every scheduler the same file: each tick runs once`)
}

// start parses the schedule file and starts its ticker; stop is a no-op
// without a file.
func (p *periodicFlags) start(ctx context.Context, s *stack, log *slog.Logger) (stop func(), err error) {
	if p.file == "" {
		return func() {}, nil
	}
	fh, err := os.Open(p.file)
	if err != nil {
		return nil, fmt.Errorf("--schedule-file: %w", err)
	}
	defer fh.Close()
	entries, err := scheduler.ParseSchedule(fh)
	if err != nil {
		return nil, fmt.Errorf("--schedule-file %s: %w", p.file, err)
	}
	t, err := scheduler.NewTicker(s.js, entries, scheduler.PeriodicConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	if err := t.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("periodic jobs scheduled", "file", p.file, "entries", len(entries))
	return t.Stop, nil
}
