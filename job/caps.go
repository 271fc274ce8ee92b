package job

import (
	"cmp"
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
// built-in default (docs/job-contract.md), filled in withDefaults.
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

	// MaxAttempts bounds heal.max_attempts (docs/healing.md: 3).
	MaxAttempts int
	// AllowInstall lets jobs ask for installs on exit 127.
	AllowInstall bool
	// Volumes is true when the fleet has a volume root.
	Volumes bool

	// MaxInlineBytes bounds the decoded inline contents of a job's files
	// (default DefaultInlineBytes).
	MaxInlineBytes int64
	// KeepOutput is the default of a job's output.keep; NoKeep turns
	// keeping off for the fleet (a job asking for it is rejected).
	KeepOutput, NoKeep bool
}

// Defaults, as docs/job-contract.md lists them.
const (
	DefaultImage = "paddock/sandbox:latest"
	DefaultQueue = "default"
)

// MinPids is the floor of the pids limit, measured: paddock-init holds 13
// threads at rest (its Go runtime, started before any job), and its
// runtime may start another few under a loaded host (a pipeline at a floor
// of 16 was refused a fork on a busy 2-core machine); bash with a
// two-command pipeline needs 3. 20 leaves init 4 threads of margin. Spec
// validation rejects less, and Caps.Validate refuses a default or cap below
// it. The memory floor is MinMemoryMB (validate.go).
const MinPids = 20

// WithDefaults returns c with every zero field filled.
func (c Caps) WithDefaults() Caps { return c.withDefaults() }

// withDefaults fills every zero field. A default follows its cap: an
// operator cap below the built-in default lowers the default to the cap,
// as an operator default above the built-in cap raises the cap.
func (c Caps) withDefaults() Caps {
	if len(c.Images) == 0 {
		c.Images = []string{DefaultImage}
	}
	if len(c.Queues) == 0 {
		c.Queues = []string{DefaultQueue}
	}
	// below returns v, or the cap mx when one is set and lower.
	below := func(v, mx int64) int64 {
		if mx != 0 {
			return min(v, mx)
		}
		return v
	}
	c.DefaultMemoryMB = cmp.Or(c.DefaultMemoryMB, below(512, c.MaxMemoryMB))
	c.MaxMemoryMB = cmp.Or(c.MaxMemoryMB, max(c.DefaultMemoryMB, 2048))
	c.DefaultPids = cmp.Or(c.DefaultPids, below(64, c.MaxPids))
	c.MaxPids = cmp.Or(c.MaxPids, max(c.DefaultPids, 512))
	c.DefaultOutputBytes = cmp.Or(c.DefaultOutputBytes, below(1<<20, c.MaxOutputBytes))
	c.MaxOutputBytes = cmp.Or(c.MaxOutputBytes, max(c.DefaultOutputBytes, 16<<20))
	c.DefaultTmpfsMB = cmp.Or(c.DefaultTmpfsMB, below(64, c.MaxTmpfsMB))
	c.MaxTmpfsMB = cmp.Or(c.MaxTmpfsMB, max(c.DefaultTmpfsMB, 1024))
	if c.DefaultCPUs == 0 {
		c.DefaultCPUs = 0.5
		if c.MaxCPUs != 0 {
			c.DefaultCPUs = min(0.5, c.MaxCPUs)
		}
	}
	c.MaxCPUs = cmp.Or(c.MaxCPUs, max(c.DefaultCPUs, 2))
	belowD := func(v, mx time.Duration) time.Duration { return time.Duration(below(int64(v), int64(mx))) }
	// The job timeout first: the default command timeout never exceeds
	// the default job timeout.
	c.DefaultJobTimeout = cmp.Or(c.DefaultJobTimeout, belowD(300*time.Second, c.MaxJobTimeout))
	c.MaxJobTimeout = cmp.Or(c.MaxJobTimeout, max(c.DefaultJobTimeout, 3600*time.Second))
	c.DefaultCommandTimeout = cmp.Or(c.DefaultCommandTimeout, min(belowD(30*time.Second, c.MaxCommandTimeout), max(c.DefaultJobTimeout.Truncate(time.Second), time.Second)))
	c.MaxCommandTimeout = cmp.Or(c.MaxCommandTimeout, max(c.DefaultCommandTimeout, 300*time.Second))
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 3)
	c.MaxInlineBytes = cmp.Or(c.MaxInlineBytes, DefaultInlineBytes)
	return c
}

// CapsError is every problem of one Caps; it wraps ErrInvalidCaps. Each
// FieldError names the Caps field (e.g. "MaxMemoryMB"), so that a caller
// can name its own setting (a flag) instead, and says what is allowed.
type CapsError struct {
	Fields []FieldError
}

func (e *CapsError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return "job: invalid caps: " + strings.Join(parts, "; ")
}

// Unwrap makes every CapsError match ErrInvalidCaps.
func (e *CapsError) Unwrap() error { return ErrInvalidCaps }

// Validate checks c (after defaults) for settings that would let a job run
// outside its caps, below what a sandbox needs, or reject every job: each
// cap at least its floor (MinMemoryMB, MinPids, MinCPUs, one byte, one
// second), each default within [floor, cap], timeouts of whole seconds, a
// default command timeout no longer than the default job timeout,
// well-formed image, queue and env allowlist entries. The error is a
// *CapsError. Call it once at start-up; Validate(spec, caps) trusts the
// caps.
func (c Caps) Validate() error {
	c = c.withDefaults()
	e := &CapsError{}
	bad := func(field, format string, a ...any) {
		e.Fields = append(e.Fields, FieldError{Field: field, Message: fmt.Sprintf(format, a...)})
	}
	for _, img := range c.Images {
		if img == "" || strings.ContainsFunc(img, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			bad("Images", "image %q must be non-empty without spaces or control characters", img)
		}
	}
	for _, q := range c.Queues {
		if !queuePattern.MatchString(q) {
			bad("Queues", "queue %q must match [a-z0-9][a-z0-9_-]{0,31}", q)
		}
	}
	for _, env := range c.EnvAllow {
		if !envNamePattern.MatchString(strings.TrimSuffix(env, "*")) && env != "*" {
			bad("EnvAllow", "env allowlist entry %q must be NAME or PREFIX*", env)
		}
	}
	ints := []struct {
		def, mx        string // the fields
		defV, floor, v int64
		unit           string
	}{
		{"DefaultMemoryMB", "MaxMemoryMB", c.DefaultMemoryMB, MinMemoryMB, c.MaxMemoryMB, " MiB"},
		{"DefaultPids", "MaxPids", c.DefaultPids, MinPids, c.MaxPids, ""},
		{"DefaultOutputBytes", "MaxOutputBytes", c.DefaultOutputBytes, 1, c.MaxOutputBytes, " bytes"},
		{"DefaultTmpfsMB", "MaxTmpfsMB", c.DefaultTmpfsMB, 1, c.MaxTmpfsMB, " MiB"},
	}
	for _, l := range ints {
		switch {
		case l.v < l.floor:
			bad(l.mx, "%d is out of range; allowed %d%s or more", l.v, l.floor, l.unit)
		case l.defV < l.floor || l.defV > l.v:
			bad(l.def, "%d is out of range; allowed %d..%d%s (the cap)", l.defV, l.floor, l.v, l.unit)
		}
	}
	switch {
	case !(c.MaxCPUs >= MinCPUs) || math.IsInf(c.MaxCPUs, 0): // also NaN
		bad("MaxCPUs", "%g is out of range; allowed %g or more (a finite number)", c.MaxCPUs, MinCPUs)
	case !(c.DefaultCPUs >= MinCPUs) || c.DefaultCPUs > c.MaxCPUs:
		bad("DefaultCPUs", "%g is out of range; allowed %g..%g (the cap)", c.DefaultCPUs, MinCPUs, c.MaxCPUs)
	}
	durs := []struct {
		def, mx string
		defV, v time.Duration
	}{
		{"DefaultCommandTimeout", "MaxCommandTimeout", c.DefaultCommandTimeout, c.MaxCommandTimeout},
		{"DefaultJobTimeout", "MaxJobTimeout", c.DefaultJobTimeout, c.MaxJobTimeout},
	}
	n := len(e.Fields)
	for _, d := range durs {
		switch {
		case d.v < time.Second:
			bad(d.mx, "%s is out of range; allowed 1s or more, in whole seconds", d.v)
		case d.v%time.Second != 0:
			bad(d.mx, "%s is not a whole number of seconds", d.v)
		case d.defV < time.Second || d.defV > d.v:
			bad(d.def, "%s is out of range; allowed 1s..%s (the cap), in whole seconds", d.defV, d.v)
		case d.defV%time.Second != 0:
			bad(d.def, "%s is not a whole number of seconds", d.defV)
		}
	}
	// Compared only when every timeout is valid by itself.
	if len(e.Fields) == n && c.DefaultCommandTimeout > c.DefaultJobTimeout {
		bad("DefaultCommandTimeout", "%s exceeds the default job timeout %s", c.DefaultCommandTimeout, c.DefaultJobTimeout)
	}
	if c.MaxInlineBytes < 0 || c.MaxInlineBytes > MaxSpecBytes*3/4 {
		bad("MaxInlineBytes", "%d is out of range; allowed 0..%d bytes (base64 contents must fit in a %d-byte spec)", c.MaxInlineBytes, MaxSpecBytes*3/4, MaxSpecBytes)
	}
	if c.MaxAttempts < 1 {
		bad("MaxAttempts", "%d is out of range; allowed 1 or more", c.MaxAttempts)
	}
	if len(e.Fields) > 0 {
		return e
	}
	return nil
}

// QueueWeights is the one priority rule of the fleet: queues in order,
// highest priority first, get asynq weights 2^(n-1) … 4, 2, 1, so each
// queue is served about twice as often as the next one while both have
// work.
func QueueWeights(order []string) map[string]int {
	w := make(map[string]int, len(order))
	for i, q := range order {
		w[q] = 1 << min(len(order)-1-i, 30)
	}
	return w
}
