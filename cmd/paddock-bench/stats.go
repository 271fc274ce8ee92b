package main

import (
	"math"
	"slices"
	"time"
)

// steps times the consecutive steps of one job.
type steps struct {
	last   time.Time
	d      map[string]time.Duration
	order  []string
	counts map[string]int
}

func newSteps() *steps {
	return &steps{last: time.Now(), d: map[string]time.Duration{}, counts: map[string]int{}}
}

// mark ends the step called name at now.
func (s *steps) mark(name string) {
	now := time.Now()
	s.note(name, now.Sub(s.last))
	s.last = now
}

// note records a duration that is not a step of the job's wall time (e.g.
// the command's run time measured inside the container).
func (s *steps) note(name string, d time.Duration) {
	if _, ok := s.d[name]; !ok {
		s.order = append(s.order, name)
	}
	s.d[name] += d
}

func (s *steps) count(name string) { s.counts[name]++ }

// result is everything measured for one scenario.
type result struct {
	sc *scenario
	// lat are the job latencies one at a time (concurrency 1).
	lat []time.Duration
	// satLat are the job latencies during the throughput rounds.
	satLat []time.Duration
	rounds []round
	// stepLat are the per-step latencies of the concurrency-1 jobs.
	stepLat   map[string][]time.Duration
	stepOrder []string
	counts    map[string]int
	errors    int
	firstErr  string
}

type round struct {
	Jobs     int     `json:"jobs"`
	WindowS  float64 `json:"window_s"`
	JobsPerS float64 `json:"jobs_per_s"`
	Errors   int     `json:"errors"`
	// DrainS is how long the scenario's background work (removals, pool
	// refill) took after its last job ended.
	DrainS float64 `json:"drain_s,omitempty"`
	// JobsPerSDrained is JobsPerS with the drain time added to the window.
	JobsPerSDrained float64 `json:"jobs_per_s_drained,omitempty"`
}

func newResult(sc *scenario) *result {
	return &result{sc: sc, stepLat: map[string][]time.Duration{}, counts: map[string]int{}}
}

func (r *result) addSteps(s *steps) {
	for _, name := range s.order {
		if _, ok := r.stepLat[name]; !ok {
			r.stepOrder = append(r.stepOrder, name)
		}
		r.stepLat[name] = append(r.stepLat[name], s.d[name])
	}
	for k, n := range s.counts {
		r.counts[k] += n
	}
}

func (r *result) fail(err error) {
	r.errors++
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// jobsPerS is the median of the rounds' rates.
func (r *result) jobsPerS() float64 {
	var v []float64
	for _, rd := range r.rounds {
		v = append(v, rd.JobsPerS)
	}
	return medianF(v)
}

// jobsPerSDrained is the median of the rounds' rates with the drain time
// counted in (equal to jobsPerS for scenarios without background work).
func (r *result) jobsPerSDrained() float64 {
	var v []float64
	for _, rd := range r.rounds {
		x := rd.JobsPerSDrained
		if x == 0 {
			x = rd.JobsPerS
		}
		v = append(v, x)
	}
	return medianF(v)
}

// pct returns the p-th percentile (nearest rank) of d in milliseconds.
func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = min(max(i, 0), len(s)-1)
	return ms(s[i])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
