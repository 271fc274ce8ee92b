package job

import (
	"encoding/json"
	"time"
)

// WorkerBeat is what a worker's heartbeat key (<prefix>worker:<id>, in
// Redis) holds while the worker is alive: the worker's own facts, renewed
// with every beat, for the operator's fleet view (`paddock fleet`). A
// worker that predates it wrote only the beat's time (RFC 3339); ParseWorkerBeat
// reads both. Host names are here: it is for operators only, never for a
// tenant (docs/threat-model.md).
type WorkerBeat struct {
	ID   string `json:"id"`
	Host string `json:"host,omitempty"` // os.Hostname of the worker's process
	PID  int    `json:"pid,omitempty"`
	// Concurrency is the jobs the worker runs at once at most.
	Concurrency int `json:"concurrency"`
	// Running is the jobs it runs now, each in its own box (a job waiting
	// for its volume lease counts too).
	Running int `json:"running"`
	// Pool is the warm boxes ready now (pre-started, never used).
	Pool      int       `json:"pool"`
	StartedAt time.Time `json:"started_at,omitzero"`
	BeatAt    time.Time `json:"beat_at"`
}

// ParseWorkerBeat reads a heartbeat key's value: a WorkerBeat as JSON, or
// the bare RFC 3339 time older workers wrote (then only BeatAt is known).
func ParseWorkerBeat(id, v string) (WorkerBeat, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return WorkerBeat{ID: id, BeatAt: t}, nil
	}
	var b WorkerBeat
	if err := json.Unmarshal([]byte(v), &b); err != nil {
		return WorkerBeat{ID: id}, err
	}
	b.ID = id // the key names the worker, whatever the value says
	return b, nil
}
