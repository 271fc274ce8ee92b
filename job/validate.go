package job

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every validation failure; errors.Is(err, ErrInvalid)
// tells a rejected job from an infrastructure error.
var ErrInvalid = errors.New("job: invalid spec")

// Size limits of a spec; they are fixed, not operator caps.
const (
	MaxCommandBytes = 64 << 10  // 64 KiB
	MaxSpecBytes    = 256 << 10 // a whole document
	MaxEnvVars      = 64
	MaxEnvValue     = 4 << 10
	MaxLabels       = 32
	MaxLabelKey     = 63
	MaxLabelValue   = 256
	MaxWorkdir      = 256
)

// Floors of the resource limits: below them the container engine refuses to
// create the container (Docker: "Minimum memory limit allowed is 6MB"; CFS
// quota of at least 1 ms per 100 ms period), which would turn a bad spec
// into an infra failure instead of a rejection. Measured: paddock-init and
// bash run a pipeline in 6 MiB (init's resident set is ~3.5 MiB). The pids
// floor is MinPids (caps.go).
const (
	MinMemoryMB = 6
	MinCPUs     = 0.01
)

// FieldError names one invalid field and what is allowed there.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string { return e.Field + ": " + e.Message }

// ValidationError is every FieldError of one spec; it wraps ErrInvalid.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return "job: invalid spec: " + strings.Join(parts, "; ")
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

// FieldErrors returns the field errors inside err, a single one naming field
// "spec" when err is not a *ValidationError, or nil when err is nil.
func FieldErrors(err error) []FieldError {
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Fields
	}
	return []FieldError{{Field: "spec", Message: err.Error()}}
}

var (
	idPattern      = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	labelPattern   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)
	volumePattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	queuePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
)

// reservedEnv are names a job may never set: they belong to the sandbox or
// change how every program in it behaves.
var reservedEnv = []string{
	"PATH", "HOME", "USER", "SHELL", "PWD", "HOSTNAME", "IFS", "ENV", "BASH_ENV",
	"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "TRACEPARENT", "TRACESTATE",
	"GLIBC_TUNABLES", // CVE-2023-4911: tunables parsed by the dynamic loader of every program
}

// IsReservedEnv reports whether a job may not set name.
func IsReservedEnv(name string) bool {
	return slices.Contains(reservedEnv, name) || strings.HasPrefix(name, "PADDOCK_") ||
		strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "BASH_FUNC_")
}

// ValidID reports whether id has the form of a job id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// idRule is what a job id must be, as error messages say it.
const idRule = "must match [A-Za-z0-9._-]{1,128}"

// CheckID returns nil for a well-formed job id, else a *ValidationError
// (wrapping ErrInvalid) that quotes the id, cut at 40 bytes.
func CheckID(id string) error {
	if ValidID(id) {
		return nil
	}
	if len(id) > 40 {
		id = id[:40] + "…"
	}
	return &ValidationError{Fields: []FieldError{{Field: "id", Message: fmt.Sprintf("%q %s", id, idRule)}}}
}

// Validate checks s against caps and returns the effective limits. Every
// failing field is reported, not only the first; the error wraps ErrInvalid.
//
// Validate trusts caps: check them once with Caps.Validate at start-up, or a
// default above its cap passes through to the Effective limits.
func Validate(s *Spec, caps Caps) (Effective, error) {
	if s == nil {
		return Effective{}, invalid("spec", "missing")
	}
	caps = caps.withDefaults()
	var v validator

	// Fields are checked in this order, which is the order of the errors.
	v.checkHeader(s)
	v.checkCommand(s.Command)
	v.checkImage(s.Image, caps.Images)
	v.checkEnv(s.Env, caps.EnvAllow)
	v.checkWorkdir(s.Workdir)
	v.checkQueue(s.Queue, caps.Queues)
	v.checkLabels(s.Labels)
	v.checkHeal(s.Heal, caps)
	v.checkVolume(s.Volume, caps.Volumes)
	v.checkIO(s, caps)
	v.checkGrants(s.Grants)
	eff := v.limits(s.Limits, caps)
	eff.KeepOutput = KeepOutput(s, caps)
	// Last: it applies only when every check above passed.
	v.fitCommandTimeout(&eff, s.Limits.CommandTimeoutS)

	if !v.ok() {
		return Effective{}, &ValidationError{Fields: v.errs}
	}
	return eff, nil
}

// checkHeader checks the version and the id.
func (v *validator) checkHeader(s *Spec) {
	if s.V != 0 && s.V != Version {
		v.add("v", fmt.Sprintf("unsupported version %d; this server speaks version %d (0 or absent means %d)", s.V, Version, Version))
	}
	if s.ID != "" && !ValidID(s.ID) {
		v.add("id", idRule)
	}
}

// checkCommand checks command as text of 1..MaxCommandBytes bytes that is
// not only whitespace.
func (v *validator) checkCommand(command string) {
	if v.text("command", command, 1, MaxCommandBytes) && strings.Trim(command, " \t\n\r\f\v") == "" {
		v.add("command", fmt.Sprintf("must not be blank; allowed 1..%d bytes with a character other than space, tab or newline", MaxCommandBytes))
	}
}

// checkImage checks that image, if set, is one of the allowed images.
func (v *validator) checkImage(image string, allowed []string) {
	if image != "" && !slices.Contains(allowed, image) {
		v.add("image", fmt.Sprintf("%q is not allowed; allowed images: %s", Truncate(image, 100), strings.Join(allowed, ", ")))
	}
}

// checkEnv checks the number of variables, then each variable in name
// order: its name, that it is not reserved, the operator's allowlist (when
// set) and its value.
func (v *validator) checkEnv(env map[string]string, allow []string) {
	if len(env) > MaxEnvVars {
		v.add("env", fmt.Sprintf("%d variables; at most %d allowed", len(env), MaxEnvVars))
	}
	for _, name := range sortedKeys(env) {
		val := env[name]
		f := "env." + name
		switch {
		case !envNamePattern.MatchString(name):
			v.add("env", fmt.Sprintf("name %q must match [A-Za-z_][A-Za-z0-9_]{0,127}", Truncate(name, 40)))
		case IsReservedEnv(name):
			v.add(f, "is reserved for the sandbox (PATH, HOME, LD_*, PADDOCK_*, … cannot be set)")
		case len(allow) > 0 && !envAllowed(allow, name):
			v.add(f, "is not in the operator's env allowlist: "+strings.Join(allow, ", "))
		default:
			v.text(f, val, 0, MaxEnvValue)
		}
	}
}

// checkWorkdir checks that workdir, if set, is an absolute path of at most
// MaxWorkdir bytes without a '..' element.
func (v *validator) checkWorkdir(workdir string) {
	if workdir == "" {
		return
	}
	switch {
	case !strings.HasPrefix(workdir, "/"):
		v.add("workdir", fmt.Sprintf("must be an absolute path of at most %d bytes", MaxWorkdir))
	case len(workdir) > MaxWorkdir:
		v.add("workdir", fmt.Sprintf("is %d bytes; at most %d allowed", len(workdir), MaxWorkdir))
	case slices.Contains(strings.Split(workdir, "/"), ".."):
		v.add("workdir", "must not contain '..'")
	default:
		v.text("workdir", workdir, 1, MaxWorkdir)
	}
}

// checkQueue checks that queue, if set, is one of the configured queues.
func (v *validator) checkQueue(queue string, queues []string) {
	if queue != "" && !slices.Contains(queues, queue) {
		v.add("queue", fmt.Sprintf("%q is not a configured queue; queues: %s", Truncate(queue, 100), strings.Join(queues, ", ")))
	}
}

// MaxGrants is the most grants a job may name.
const MaxGrants = 16

// grantPattern is a grant name: the Host a box names to the broker, so a
// DNS label.
var grantPattern = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// checkGrants checks the number of grants, then each name, once each.
func (v *validator) checkGrants(grants []string) {
	if len(grants) > MaxGrants {
		v.add("grants", fmt.Sprintf("%d grants; at most %d allowed", len(grants), MaxGrants))
		return
	}
	for i, g := range grants {
		f := fmt.Sprintf("grants[%d]", i)
		switch {
		case !grantPattern.MatchString(g):
			v.add(f, fmt.Sprintf("%q must be a DNS label: 1-63 of [a-z0-9-], starting with a letter, not ending with '-'", Truncate(g, 70)))
		case slices.Contains(grants[:i], g):
			v.add(f, fmt.Sprintf("%q is named twice", g))
		}
	}
}

// checkLabels checks the number of labels, then each label in key order:
// its key, then its value.
func (v *validator) checkLabels(labels map[string]string) {
	if len(labels) > MaxLabels {
		v.add("labels", fmt.Sprintf("%d labels; at most %d allowed", len(labels), MaxLabels))
	}
	for _, k := range sortedKeys(labels) {
		if !labelPattern.MatchString(k) {
			v.add("labels", fmt.Sprintf("key %q must be 1-63 of [A-Za-z0-9._/-], starting and ending alphanumeric", Truncate(k, 40)))
			continue
		}
		v.text("labels."+k, labels[k], 0, MaxLabelValue)
	}
}

// checkHeal checks the heal policy, if any, against caps.
func (v *validator) checkHeal(h *HealPolicy, caps Caps) {
	if h == nil {
		return
	}
	switch h.Mode {
	case "", HealOff, HealRules, HealLLM:
	default:
		v.add("heal.mode", fmt.Sprintf("%q is not one of off, rules, llm", Truncate(string(h.Mode), 20)))
	}
	if h.MaxAttempts < 0 || h.MaxAttempts > caps.MaxAttempts {
		v.add("heal.max_attempts", fmt.Sprintf("%d is out of range; allowed 1..%d (0 = default)", h.MaxAttempts, caps.MaxAttempts))
	}
	if h.AllowInstall && !caps.AllowInstall {
		v.add("heal.allow_install", "installs are disabled by the operator; allowed: false")
	}
}

// checkVolume checks the shared volume, if any; enabled says whether the
// fleet has shared volumes.
func (v *validator) checkVolume(vol *Volume, enabled bool) {
	if vol == nil {
		return
	}
	if !volumePattern.MatchString(vol.Name) || strings.Contains(vol.Name, "..") {
		v.add("volume.name", "must be 1-64 of [A-Za-z0-9._-], starting alphanumeric, without '..'")
	}
	if vol.MaxBytes < 0 || vol.MaxBytes > MaxVolumeBytes {
		v.add("volume.max_bytes", fmt.Sprintf("%d is out of range; allowed 0..%d bytes (0 = no bound)", vol.MaxBytes, int64(MaxVolumeBytes)))
	}
	if vol.MaxBytes > 0 && vol.Mode == VolumeRO {
		v.add("volume.max_bytes", "a quota needs a rw volume (a ro job cannot grow it)")
	}
	if vol.Delete && vol.Mode == VolumeRO {
		v.add("volume.delete", "deleting the volume needs it mounted rw")
	}
	switch vol.Mode {
	case "", VolumeRW, VolumeRO:
	default:
		v.add("volume.mode", fmt.Sprintf("%q is not rw or ro", Truncate(string(vol.Mode), 20)))
	}
	if !enabled {
		v.add("volume", "shared volumes are not enabled on this fleet (no volume root configured)")
	}
}

// limits resolves each limit against its default and the range caps
// allow. It does not compare the command timeout with the job timeout; see
// fitCommandTimeout.
func (v *validator) limits(l Limits, caps Caps) Effective {
	eff := Effective{
		MemoryMB:    v.int("limits.memory_mb", l.MemoryMB, caps.DefaultMemoryMB, MinMemoryMB, caps.MaxMemoryMB, "MiB"),
		Pids:        v.int("limits.pids", l.Pids, caps.DefaultPids, MinPids, caps.MaxPids, ""),
		OutputBytes: v.int("limits.output_bytes", l.OutputBytes, caps.DefaultOutputBytes, 1, caps.MaxOutputBytes, "bytes"),
		TmpfsMB:     v.int("limits.tmpfs_mb", l.TmpfsMB, caps.DefaultTmpfsMB, 1, caps.MaxTmpfsMB, "MiB"),
	}
	eff.CommandTimeout = time.Duration(v.int("limits.command_timeout_s", l.CommandTimeoutS,
		secs(caps.DefaultCommandTimeout), 1, secs(caps.MaxCommandTimeout), "s")) * time.Second
	eff.JobTimeout = time.Duration(v.int("limits.job_timeout_s", l.JobTimeoutS,
		secs(caps.DefaultJobTimeout), 1, secs(caps.MaxJobTimeout), "s")) * time.Second
	eff.CPUs = caps.DefaultCPUs
	if c := l.CPUs; c != nil {
		if !(*c >= MinCPUs) || *c > caps.MaxCPUs {
			v.add("limits.cpus", fmt.Sprintf("%g is out of range; allowed %g..%g", *c, MinCPUs, caps.MaxCPUs))
		} else {
			eff.CPUs = *c
		}
	}
	return eff
}

// fitCommandTimeout handles a command timeout longer than the job timeout,
// but only when no error was reported so far: the default command timeout
// (asked is nil) is cut to the job timeout, an asked-for one is an error.
func (v *validator) fitCommandTimeout(eff *Effective, asked *int64) {
	if eff.CommandTimeout > eff.JobTimeout && v.ok() {
		if asked == nil {
			// Only the default is longer than the job: no command can outlive the job anyway.
			eff.CommandTimeout = eff.JobTimeout
		} else {
			v.add("limits.command_timeout_s", fmt.Sprintf("%d exceeds the job timeout (limits.job_timeout_s) of %d s; allowed 1..%d s",
				secs(eff.CommandTimeout), secs(eff.JobTimeout), secs(eff.JobTimeout)))
		}
	}
}

// Normalize fills the defaults a validated spec carries through the queue:
// version, image, queue and volume mode.
func Normalize(s *Spec, caps Caps) {
	caps = caps.withDefaults()
	s.V = Version
	if s.Image == "" {
		s.Image = caps.Images[0]
	}
	if s.Queue == "" {
		s.Queue = caps.Queues[0]
	}
	if s.Volume != nil && s.Volume.Mode == "" {
		s.Volume.Mode = VolumeRW
	}
}

type validator struct{ errs []FieldError }

func (v *validator) ok() bool { return len(v.errs) == 0 }

func (v *validator) add(field, msg string) {
	v.errs = append(v.errs, FieldError{Field: field, Message: msg})
}

// text checks a string field: valid UTF-8, no NUL, length in [min, max]
// bytes (min is 0 or 1). It reports whether the field passed.
func (v *validator) text(field, s string, min, max int) bool {
	switch {
	case !utf8.ValidString(s):
		v.add(field, "is not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		v.add(field, "contains a NUL byte")
	case len(s) < min:
		v.add(field, fmt.Sprintf("must not be empty; allowed %d..%d bytes", min, max))
	case len(s) > max:
		v.add(field, fmt.Sprintf("is %d bytes; at most %d allowed", len(s), max))
	default:
		return true
	}
	return false
}

// int resolves an optional integer against its default and [min, max].
func (v *validator) int(field string, p *int64, def, min, max int64, unit string) int64 {
	if p == nil {
		return def
	}
	if *p < min || *p > max {
		u := ""
		if unit != "" {
			u = " " + unit
		}
		msg := fmt.Sprintf("%d is out of range; allowed %d..%d%s", *p, min, max, u)
		if *p > 0 && *p < min && field == "limits.pids" {
			msg = fmt.Sprintf("%d is below the floor of %d (the sandbox's init and a shell need %d processes); allowed %d..%d", *p, min, min, min, max)
		}
		v.add(field, msg)
		return def
	}
	return *p
}

func envAllowed(allow []string, name string) bool {
	for _, a := range allow {
		if a == name || (strings.HasSuffix(a, "*") && strings.HasPrefix(name, strings.TrimSuffix(a, "*"))) {
			return true
		}
	}
	return false
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

// Truncate shortens s to at most n bytes on a rune boundary, marking the
// cut with "…" (after the n bytes). It is how every package quotes
// untrusted or long text in a message.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
