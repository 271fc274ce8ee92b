package results

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/paddockhq/paddock/job"
)

// trimMarker ends a free text (error, command, note, label value) that fit
// had to cut; outputs record their cut in Output.Truncated/OmittedBytes.
const trimMarker = "…[trimmed]"

// minCutText is the length above which fit's last resort cuts a free text.
const minCutText = 64

// fit is the one rule bounding a stored result, in Redis and on NATS alike
// (Store.Record publishes the bytes Redis holds). It encodes r with
// json.Marshal in at most limit bytes, measured on that encoding, so JSON
// escaping counts: a control byte takes 6 bytes (\u0001), an invalid UTF-8
// byte becomes \ufffd, '<', '>' and '&' take 6 bytes each.
//
// A result that fits is returned exactly as json.Marshal writes it, with
// trimmed false. Otherwise the middle of its outputs is cut, every output by
// the same share: stdout and stderr keep a head and a tail and are marked
// Truncated, OmittedBytes counting what is gone (as job.Output does for the
// output cap); each attempt's stderr tail keeps its end. Only when no output
// text is left and the result still does not fit are its other free texts
// (error, field errors, attempts' commands, installs and notes, label values)
// cut to a head ending in trimMarker. The encoding is always valid UTF-8; an
// error means the result does not fit even then (limit far too small).
func fit(r job.Result, limit int) (data []byte, trimmed bool, err error) {
	// Every byte of text encodes to at least one byte, so texts longer than
	// the limit can be cut before the first, possibly huge, encoding (16 MiB
	// of control bytes would take 96 MiB).
	if n := outputBytes(r); n > limit {
		r, _ = cutOutputs(r, 0.9*float64(limit)/float64(n))
		trimmed = true
	}
	for range 64 {
		data, err := json.Marshal(r)
		if err != nil {
			return nil, false, err
		}
		if len(data) <= limit {
			return data, trimmed, nil
		}
		// Keep a share of each text in proportion to the overshoot, at
		// most half, so that a few rounds suffice.
		keep := min(0.5, 0.9*float64(limit)/float64(len(data)))
		var cut bool
		if r, cut = cutOutputs(r, keep); !cut {
			r, cut = cutTexts(r, keep)
		}
		if !cut {
			return nil, false, fmt.Errorf("result is %d bytes with its outputs and texts cut; the bound is %d", len(data), limit)
		}
		trimmed = true
	}
	return nil, false, fmt.Errorf("result does not fit in %d bytes", limit)
}

// outputBytes is the length of r's output texts.
func outputBytes(r job.Result) int {
	n := len(r.Stdout.Text) + len(r.Stdout.Tail) + len(r.Stderr.Text) + len(r.Stderr.Tail)
	for _, a := range r.Attempts {
		n += len(a.StderrTail)
	}
	return n
}

// cutOutputs keeps about the share keep (below 1) of each output text of r
// and reports whether there was any to cut. r's slices are not modified.
func cutOutputs(r job.Result, keep float64) (job.Result, bool) {
	cut := shrink(&r.Stdout, keep)
	cut = shrink(&r.Stderr, keep) || cut
	r.Attempts = slices.Clone(r.Attempts)
	for i := range r.Attempts {
		if t := r.Attempts[i].StderrTail; t != "" {
			r.Attempts[i].StderrTail = t[nextRune(t, len(t)-int(float64(len(t))*keep)):]
			cut = true
		}
	}
	return r, cut
}

// shrink keeps about the share keep (below 1) of o's kept text, dropping
// from the middle.
func shrink(o *job.Output, keep float64) bool {
	kept := len(o.Text) + len(o.Tail)
	if kept == 0 {
		return false
	}
	if !o.Truncated && o.Tail == "" {
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
		o.Truncated = true
	}
	o.OmittedBytes += int64(kept - len(o.Text) - len(o.Tail))
	return true
}

// cutTexts is fit's last resort: it keeps about the share keep of each free
// text longer than minCutText and appends trimMarker, reporting whether it
// cut any. r's slices and map are not modified.
func cutTexts(r job.Result, keep float64) (job.Result, bool) {
	cut := false
	text := func(s string) string {
		if len(s) <= minCutText {
			return s
		}
		cut = true
		return s[:runeStart(s, int(float64(len(s))*keep))] + trimMarker
	}
	r.Error = text(r.Error)
	r.Errors = slices.Clone(r.Errors)
	for i := range r.Errors {
		r.Errors[i].Field = text(r.Errors[i].Field)
		r.Errors[i].Message = text(r.Errors[i].Message)
	}
	r.Attempts = slices.Clone(r.Attempts)
	for i := range r.Attempts {
		a := &r.Attempts[i]
		a.Command, a.Install, a.Note = text(a.Command), text(a.Install), text(a.Note)
	}
	r.Labels = maps.Clone(r.Labels)
	for k, v := range r.Labels {
		r.Labels[k] = text(v)
	}
	return r, cut
}

// runeStart moves i back to the start of the UTF-8 sequence it falls in
// (for cutting a head: s[:i]). It moves at most utf8.UTFMax-1 bytes: in
// invalid UTF-8 (a run of continuation bytes) it cuts where it is, and
// json.Marshal replaces the stray bytes.
func runeStart(s string, i int) int {
	for range utf8.UTFMax - 1 {
		if i <= 0 || i >= len(s) || utf8.RuneStart(s[i]) {
			break
		}
		i--
	}
	return i
}

// nextRune moves i forward to the next UTF-8 sequence start (for cutting a
// tail: s[i:]), at most utf8.UTFMax-1 bytes, so that a tail always gets
// shorter.
func nextRune(s string, i int) int {
	for range utf8.UTFMax - 1 {
		if i >= len(s) || utf8.RuneStart(s[i]) {
			break
		}
		i++
	}
	return i
}
