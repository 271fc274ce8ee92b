package job

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// ErrInvalidCaps is wrapped by Caps.Validate's errors: an operator
// misconfiguration, never a job's fault.
var ErrInvalidCaps = errors.New("job: invalid caps")

// Caps are the operator's limits and defaults. A zero field takes the
// DESIGN.md §3 default, filled in withDefaults.
type Caps struct {
	// Images a job may name; the first is the default image.
	Images []string
	// Queues a job may name; the first is the default queue.
	Queues []string
	// EnvAllow, when non-empty, lists the env names a job may set
	// ("NAME" or "PREFIX*"). Reserved names are refused regardless.
	EnvAllow []string

	DefaultMemoryMB, MaxMemoryMB       int64
	DefaultCPUs, MaxCPUs               float64
	DefaultPids, MaxPids               int64
	DefaultOutputBytes, MaxOutputBytes int64
	DefaultTmpfsMB, MaxTmpfsMB         int64

	DefaultCommandTimeout, MaxCommandTimeout time.Duration
	DefaultJobTimeout, MaxJobTimeout         time.Duration

	// MaxAttempts bounds heal.max_attempts (DESIGN.md §4: 3).
	MaxAttempts int
	// AllowInstall lets jobs ask for installs on exit 127.
	AllowInstall bool
	// Volumes is true when the fleet has a volume root.
	Volumes bool
}

// Defaults from DESIGN.md §3.
const (
	DefaultImage = "paddock/sandbox:latest"
	DefaultQueue = "default"
)

// WithDefaults returns c with every zero field filled.
func (c Caps) WithDefaults() Caps { return c.withDefaults() }

func (c Caps) withDefaults() Caps {
	if len(c.Images) == 0 {
		c.Images = []string{DefaultImage}
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{DefaultQueue}
	}
	def64 := func(p *int64, v int64) {
		if *p == 0 {
			*p = v
		}
	}
	def64(&c.DefaultMemoryMB, 512)
	def64(&c.MaxMemoryMB, max(c.DefaultMemoryMB, 2048))
	def64(&c.DefaultPids, 64)
	def64(&c.MaxPids, max(c.DefaultPids, 512))
	def64(&c.DefaultOutputBytes, 1<<20)
	def64(&c.MaxOutputBytes, max(c.DefaultOutputBytes, 16<<20))
	def64(&c.DefaultTmpfsMB, 64)
	def64(&c.MaxTmpfsMB, max(c.DefaultTmpfsMB, 1024))
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = 0.5
	}
	if c.MaxCPUs == 0 {
		c.MaxCPUs = max(c.DefaultCPUs, 2)
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defD(&c.DefaultCommandTimeout, 30*time.Second)
	defD(&c.MaxCommandTimeout, max(c.DefaultCommandTimeout, 300*time.Second))
	defD(&c.DefaultJobTimeout, 300*time.Second)
	defD(&c.MaxJobTimeout, max(c.DefaultJobTimeout, 3600*time.Second))
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	return c
}

// Validate checks c (after defaults) for settings that would let a job run
// outside its caps or reject every job: each default within [floor, cap],
// timeouts of whole seconds, a default command timeout no longer than the
// default job timeout, well-formed image, queue and env allowlist entries.
// Call it once at start-up; Validate(spec, caps) trusts the caps.
func (c Caps) Validate() error {
	c = c.withDefaults()
	var probs []string
	bad := func(format string, a ...any) { probs = append(probs, fmt.Sprintf(format, a...)) }
	for _, img := range c.Images {
		if img == "" || strings.ContainsFunc(img, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			bad("image %q must be non-empty without spaces or control characters", img)
		}
	}
	for _, q := range c.Queues {
		if !queuePattern.MatchString(q) {
			bad("queue %q must match [a-z0-9][a-z0-9_-]{0,31}", q)
		}
	}
	for _, e := range c.EnvAllow {
		if !envNamePattern.MatchString(strings.TrimSuffix(e, "*")) && e != "*" {
			bad("env allowlist entry %q must be NAME or PREFIX*", e)
		}
	}
	ints := []struct {
		name           string
		def, floor, mx int64
	}{
		{"memory MiB", c.DefaultMemoryMB, MinMemoryMB, c.MaxMemoryMB},
		{"pids", c.DefaultPids, 1, c.MaxPids},
		{"output bytes", c.DefaultOutputBytes, 1, c.MaxOutputBytes},
		{"tmpfs MiB", c.DefaultTmpfsMB, 1, c.MaxTmpfsMB},
		{"command timeout s", secs(c.DefaultCommandTimeout), 1, secs(c.MaxCommandTimeout)},
		{"job timeout s", secs(c.DefaultJobTimeout), 1, secs(c.MaxJobTimeout)},
	}
	for _, l := range ints {
		if l.def < l.floor || l.def > l.mx {
			bad("default %s %d must be within %d..%d (the cap)", l.name, l.def, l.floor, l.mx)
		}
	}
	if math.IsNaN(c.DefaultCPUs) || math.IsNaN(c.MaxCPUs) || math.IsInf(c.MaxCPUs, 0) ||
		c.DefaultCPUs < MinCPUs || c.DefaultCPUs > c.MaxCPUs {
		bad("default cpus %g must be within %g..%g (the cap)", c.DefaultCPUs, MinCPUs, c.MaxCPUs)
	}
	for _, d := range []time.Duration{c.DefaultCommandTimeout, c.MaxCommandTimeout, c.DefaultJobTimeout, c.MaxJobTimeout} {
		if d%time.Second != 0 {
			bad("timeout %s must be a whole number of seconds", d)
		}
	}
	if c.DefaultCommandTimeout > c.DefaultJobTimeout {
		bad("default command timeout %s exceeds the default job timeout %s", c.DefaultCommandTimeout, c.DefaultJobTimeout)
	}
	if c.MaxAttempts < 1 {
		bad("max attempts %d must be at least 1", c.MaxAttempts)
	}
	if len(probs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidCaps, strings.Join(probs, "; "))
	}
	return nil
}
