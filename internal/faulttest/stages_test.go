package faulttest

import (
	"slices"
	"strings"
	"time"

	"github.com/paddockhq/paddock/telemetry"
)

// stageNames are the steps of one job on the interactive path, in order:
// each is the time between two points of the job's timeline, read from the
// test client's clock (submit start, ack, result received) and from the
// services' spans (--span-file; one host, one clock).
var stageNames = []string{
	"publish",      // client: Submit until JetStream acked it
	"to_scheduler", // ack → the scheduler's paddock.schedule span starts
	"schedule",     // paddock.schedule: validate, enqueue (asynq), index
	"dequeue_wait", // schedule ends → the worker's "process <queue>" span starts
	"pre_run",      // process starts → acquire ends: decode, cancel flag, BeginRun, acquire
	"acquire",      // paddock.sandbox.acquire (inside pre_run)
	"run",          // acquire ends → the last paddock.attempt ends
	"record",       // the last attempt ends → the process span ends: record, index, publish
	"deliver",      // the process span ends → the client has the result
}

// jobTimeline is one job's client-side points.
type jobTimeline struct {
	id                  string
	start, acked, recvd time.Time
}

// stages splits each job's latency into stageNames (ms); a job whose spans
// are missing is skipped. spans are every span of the span file.
func stages(jobs []jobTimeline, spans []telemetry.SpanRecord) (perJob []map[string]float64) {
	byTrace := map[string][]telemetry.SpanRecord{}
	traceOf := map[string]string{}
	for _, s := range spans {
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
		if id, ok := s.Attributes[string(telemetry.AttrJobID)].(string); ok {
			traceOf[id] = s.TraceID
		}
	}
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }
	for _, j := range jobs {
		var sched, proc, acq, att telemetry.SpanRecord
		for _, s := range byTrace[traceOf[j.id]] {
			switch {
			case s.Name == "paddock.schedule":
				sched = s
			case strings.HasPrefix(s.Name, "process "):
				proc = s
			case s.Name == "paddock.sandbox.acquire":
				acq = s
			case s.Name == "paddock.attempt" && s.End.After(att.End):
				att = s
			}
		}
		if sched.Start.IsZero() || proc.Start.IsZero() || acq.Start.IsZero() || att.Start.IsZero() {
			continue
		}
		perJob = append(perJob, map[string]float64{
			"publish":      ms(j.start, j.acked),
			"to_scheduler": ms(j.acked, sched.Start),
			"schedule":     ms(sched.Start, sched.End),
			"dequeue_wait": ms(sched.End, proc.Start),
			"pre_run":      ms(proc.Start, acq.End),
			"acquire":      ms(acq.Start, acq.End),
			"run":          ms(acq.End, att.End),
			"record":       ms(att.End, proc.End),
			"deliver":      ms(proc.End, j.recvd),
		})
	}
	return perJob
}

// stageMedians is each stage's median over the jobs.
func stageMedians(perJob []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, name := range stageNames {
		var v []float64
		for _, j := range perJob {
			v = append(v, j[name])
		}
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		out[name] = v[len(v)/2]
	}
	return out
}
