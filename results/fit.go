package results

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/paddockhq/paddock/job"
)

// fit encodes r in at most limit bytes by cutting the middle out of its
// outputs (stdout, stderr, each attempt's stderr tail), keeping heads and
// tails as job.Output does for its own cap. It is used only for the NATS
// copy of a result whose outputs exceed the server's max_payload.
func fit(r job.Result, limit int) ([]byte, error) {
	for range 64 {
		data, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if len(data) <= limit {
			return data, nil
		}
		// Keep a share of each text in proportion to the overshoot, at
		// most half, so that a few rounds suffice.
		keep := min(0.5, 0.9*float64(limit)/float64(len(data)))
		cut := shrink(&r.Stdout, keep)
		cut = shrink(&r.Stderr, keep) || cut
		attempts := make([]job.Attempt, len(r.Attempts))
		for i, a := range r.Attempts {
			if n := len(a.StderrTail); n > 0 {
				a.StderrTail = a.StderrTail[nextRune(a.StderrTail, n-int(float64(n)*keep)):]
				cut = true
			}
			attempts[i] = a
		}
		r.Attempts = attempts
		if !cut {
			return nil, fmt.Errorf("result is %d bytes without its outputs; the NATS max_payload allows %d", len(data), limit)
		}
	}
	return nil, fmt.Errorf("result does not fit the NATS max_payload (%d bytes)", limit)
}

// shrink keeps about the share keep (at most half) of o's kept text,
// dropping from the middle.
func shrink(o *job.Output, keep float64) bool {
	kept := len(o.Text) + len(o.Tail)
	if kept == 0 {
		return false
	}
	if !o.Truncated {
		// Split the whole text into a head and a tail of keep/2 each.
		t := o.Text
		n := int(float64(len(t)) * keep / 2)
		h := runeStart(t, n)
		tl := nextRune(t, len(t)-n)
		o.Text, o.Tail = t[:h], t[tl:]
		o.Truncated = true
	} else {
		o.Text = o.Text[:runeStart(o.Text, int(float64(len(o.Text))*keep))]
		o.Tail = o.Tail[nextRune(o.Tail, len(o.Tail)-int(float64(len(o.Tail))*keep)):]
	}
	o.OmittedBytes += int64(kept - len(o.Text) - len(o.Tail))
	return true
}

// runeStart moves i back to the start of the UTF-8 sequence it falls in
// (for cutting a head: s[:i]).
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// nextRune moves i forward to the next UTF-8 sequence start (for cutting a
// tail: s[i:]), so that a tail always gets shorter.
func nextRune(s string, i int) int {
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}
