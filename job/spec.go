package job

import (
	"encoding/json"
	"math"
	"time"
)

// Version is the wire version of Spec and Result documents.
const Version = 1

// Spec is one job as a pipeline submits it.
//
// Optional numeric limits are pointers so that "absent" (use the operator's
// default) can be told apart from an explicit, invalid zero.
type Spec struct {
	V       int               `json:"v,omitempty"`
	ID      string            `json:"id,omitempty"`
	Command string            `json:"command"`
	Image   string            `json:"image,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Limits  Limits            `json:"limits,omitzero"`
	Queue   string            `json:"queue,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Heal    *HealPolicy       `json:"heal,omitempty"`
	Volume  *Volume           `json:"volume,omitempty"`

	// Agent I/O (io.go): files written under the workspace before the
	// first command, the command's stdin, what to do with its output, and
	// the artifacts collected after it.
	Files     []File        `json:"files,omitempty"`
	Stdin     string        `json:"stdin,omitempty"`
	Output    *OutputPolicy `json:"output,omitempty"`
	Artifacts []string      `json:"artifacts,omitempty"`

	// Grants names the secrets broker's grants the job may use
	// (docs/broker.md): at most MaxGrants DNS labels, each once. The
	// scheduler refuses a grant the job's tenant does not have.
	Grants []string `json:"grants,omitempty"`

	// Tenant is set by the scheduler from the subject the submission came
	// on (the authenticated tenant); a client may leave it out or give its
	// own tenant, and a spec naming another tenant is rejected.
	Tenant string `json:"tenant,omitempty"`

	// SubmittedAt is set by the client SDK (or the scheduler when absent).
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
}

// Limits a job asks for. Absent fields take the operator's default; present
// ones must be > 0 and at most the operator's cap.
type Limits struct {
	MemoryMB        *int64   `json:"memory_mb,omitempty"`
	CPUs            *float64 `json:"cpus,omitempty"`
	Pids            *int64   `json:"pids,omitempty"`
	CommandTimeoutS *int64   `json:"command_timeout_s,omitempty"`
	JobTimeoutS     *int64   `json:"job_timeout_s,omitempty"`
	OutputBytes     *int64   `json:"output_bytes,omitempty"`
	TmpfsMB         *int64   `json:"tmpfs_mb,omitempty"`
}

// Effective is a Limits with every default applied and every cap checked;
// it is what the sandbox enforces. In JSON the timeouts are seconds
// (command_timeout_s, job_timeout_s), like the Limits a spec asks for.
type Effective struct {
	MemoryMB       int64         `json:"memory_mb"`
	CPUs           float64       `json:"cpus"`
	Pids           int64         `json:"pids"`
	CommandTimeout time.Duration `json:"-"`
	JobTimeout     time.Duration `json:"-"`
	OutputBytes    int64         `json:"output_bytes"`
	TmpfsMB        int64         `json:"tmpfs_mb"`
	// KeepOutput: the complete output goes to the tenant's output bucket.
	KeepOutput bool `json:"-"`
}

// HealMode selects how much the self-healing loop may do.
type HealMode string

const (
	HealOff   HealMode = "off"   // one attempt, no repair
	HealRules HealMode = "rules" // installs and deterministic rule repairs
	HealLLM   HealMode = "llm"   // rules first, then an LLM repair
)

// HealPolicy is a job's self-healing policy.
type HealPolicy struct {
	Mode         HealMode `json:"mode,omitempty"`
	MaxAttempts  int      `json:"max_attempts,omitempty"`  // 1..3; 0 = default
	AllowInstall bool     `json:"allow_install,omitempty"` // run installers on exit 127
	// RetryResourceKills lets the loop repair after timeout/oom/pids/output kills.
	RetryResourceKills bool `json:"retry_resource_kills,omitempty"`
}

// VolumeMode is how a job mounts a shared volume.
type VolumeMode string

const (
	VolumeRW VolumeMode = "rw"
	VolumeRO VolumeMode = "ro"
)

// Volume names a shared directory under the operator's volume root, mounted
// at /workspace.
type Volume struct {
	Name string     `json:"name"`
	Mode VolumeMode `json:"mode,omitempty"`
	// MaxBytes bounds the bytes in the volume (rw only): the kernel refuses
	// a write past max(MaxBytes, its size when the job started) (ENOSPC;
	// the job ends fsize), so a job over quota may still shrink it. 0: the
	// worker's cap (docs/job-contract.md).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Delete removes everything in the volume after the job ended (rw
	// only), under the volume's lock: how an agent session's workspace is
	// deleted.
	Delete bool `json:"delete,omitempty"`
}

// effectiveJSON is the wire form of Effective.
type effectiveJSON struct {
	MemoryMB        int64   `json:"memory_mb"`
	CPUs            float64 `json:"cpus"`
	Pids            int64   `json:"pids"`
	CommandTimeoutS float64 `json:"command_timeout_s"`
	JobTimeoutS     float64 `json:"job_timeout_s"`
	OutputBytes     int64   `json:"output_bytes"`
	TmpfsMB         int64   `json:"tmpfs_mb"`
	KeepOutput      bool    `json:"keep_output,omitempty"`
}

// MarshalJSON writes the timeouts as seconds (whole numbers for every
// Effective that Validate returns).
func (e Effective) MarshalJSON() ([]byte, error) {
	return json.Marshal(effectiveJSON{
		MemoryMB: e.MemoryMB, CPUs: e.CPUs, Pids: e.Pids,
		CommandTimeoutS: e.CommandTimeout.Seconds(), JobTimeoutS: e.JobTimeout.Seconds(),
		OutputBytes: e.OutputBytes, TmpfsMB: e.TmpfsMB, KeepOutput: e.KeepOutput,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Effective) UnmarshalJSON(data []byte) error {
	var w effectiveJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*e = Effective{
		MemoryMB: w.MemoryMB, CPUs: w.CPUs, Pids: w.Pids,
		CommandTimeout: seconds(w.CommandTimeoutS), JobTimeout: seconds(w.JobTimeoutS),
		OutputBytes: w.OutputBytes, TmpfsMB: w.TmpfsMB, KeepOutput: w.KeepOutput,
	}
	return nil
}

// seconds converts seconds to a Duration, saturating instead of overflowing.
func seconds(s float64) time.Duration {
	ns := math.Round(s * float64(time.Second))
	switch {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(ns)
}
