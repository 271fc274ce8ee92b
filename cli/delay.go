package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/client"
)

// delayFlags are submit's --at / --in (delayed jobs, docs/scheduling.md).
type delayFlags struct {
	at string
	in time.Duration
}

func (d *delayFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.at, "at", "", "do not start the job(s) before this RFC 3339 time (e.g. 2026-01-02T15:04:05Z)")
	fs.DurationVar(&d.in, "in", 0, "do not start the job(s) before this long from now (e.g. 30s, 5m)")
}

// options turns the flags into submit options.
func (d *delayFlags) options(now time.Time) ([]client.SubmitOption, error) {
	switch {
	case d.at != "" && d.in != 0:
		return nil, errors.New("give --at or --in, not both")
	case d.in < 0:
		return nil, fmt.Errorf("--in %s: must not be negative", d.in)
	case d.in > 0:
		return []client.SubmitOption{client.NotBefore(now.Add(d.in))}, nil
	case d.at != "":
		t, err := time.Parse(time.RFC3339Nano, d.at)
		if err != nil {
			return nil, fmt.Errorf("--at %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", d.at)
		}
		return []client.SubmitOption{client.NotBefore(t)}, nil
	}
	return nil, nil
}
