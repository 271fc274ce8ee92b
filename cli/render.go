package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/job"
)

// addOutputFlag adds -o/--output table|json to cmd, checked when set and
// completed in the shell.
func addOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().VarP(newChoiceValue(p, "table", outputFormats...), "output", "o", "output format: table or json (one JSON object per line, from encoding/json)")
	registerCompletion(cmd, "output", fixedCompletion(outputFormats...))
}

// printJSONL writes each of vs as one JSON line.
func printJSONL[T any](w io.Writer, vs []T) error {
	enc := json.NewEncoder(w)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

// printTable prints one line per job and a summary by state and reason.
func printTable(w io.Writer, rs []job.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREASON\tEXIT\tRUN\tOUTPUT")
	count := map[string]int{}
	for _, r := range rs {
		exit := "-"
		if r.ExitCode != nil {
			exit = fmt.Sprint(*r.ExitCode)
		}
		out := firstLine(r.Stdout.Text)
		if r.State != job.StateSucceeded {
			if e := firstLine(r.Stderr.String()); e != "" {
				out = e
			}
			if r.Error != "" {
				out = firstLine(r.Error)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Reason, exit, runTime(r), clip(out, 60))
		count[string(r.State)+"/"+string(r.Reason)]++
	}
	tw.Flush()
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", count[k], k)
	}
	fmt.Fprintf(w, "\n%d jobs: %s\n", len(rs), strings.Join(parts, ", "))
}

// printResult prints one result for a person: state, timing breakdown,
// output and attempts.
func printResult(w io.Writer, r job.Result) {
	exit := ""
	if r.ExitCode != nil {
		exit = fmt.Sprintf(", exit %d", *r.ExitCode)
	}
	fmt.Fprintf(w, "job      %s\nstate    %s (%s)%s\n", r.ID, r.State, r.Reason, exit)
	if r.Error != "" {
		fmt.Fprintf(w, "error    %s\n", r.Error)
	}
	for _, fe := range r.Errors {
		fmt.Fprintf(w, "  - %s: %s\n", fe.Field, fe.Message)
	}
	if r.Image != "" {
		fmt.Fprintf(w, "where    image %s, worker %s, run %d\n", r.Image, r.Worker, r.Runs)
	}
	if b := breakdown(r); b != "" {
		fmt.Fprintf(w, "timing   %s\n", b)
	}
	if r.State != job.StateRejected {
		printOutput(w, "stdout", r.Stdout)
		printOutput(w, "stderr", r.Stderr)
	}
	printIO(w, r)
	if len(r.Attempts) > 0 {
		fmt.Fprintln(w, "attempts")
		for _, a := range r.Attempts {
			fmt.Fprintf(w, "  %d %-8s exit %-4d %-12s %6dms  %s\n", a.N, a.Action, a.ExitCode, a.Reason, a.DurationMS, clip(firstLine(a.Command), 60))
		}
	}
}

// printIO lists what the job left in its tenant's buckets: the kept
// output (`paddock output ID`) and the artifacts (`paddock artifacts`).
func printIO(w io.Writer, r job.Result) {
	if r.Kept != nil {
		for _, k := range []struct {
			name string
			o    job.Object
		}{{"stdout", r.Kept.Stdout}, {"stderr", r.Kept.Stderr}} {
			switch {
			case k.o.Name == "":
				fmt.Fprintf(w, "kept     %s: %s\n", k.name, k.o.Note)
			case k.o.Note != "":
				fmt.Fprintf(w, "kept     %s: %d bytes, sha256 %s (%s)\n", k.name, k.o.Bytes, k.o.SHA256, k.o.Note)
			default:
				fmt.Fprintf(w, "kept     %s: %d bytes, sha256 %s (paddock output %s%s)\n", k.name, k.o.Bytes, k.o.SHA256, r.ID, map[bool]string{true: " --stderr"}[k.name == "stderr"])
			}
		}
	}
	for _, a := range r.Artifacts {
		fmt.Fprintf(w, "artifact %s  %d bytes  sha256 %s\n", a.Path, a.Bytes, a.SHA256)
	}
	for _, f := range r.Refused {
		fmt.Fprintf(w, "refused  %s: %s\n", f.Path, f.Reason)
	}
}

func printOutput(w io.Writer, name string, o job.Output) {
	trunc := ""
	if o.Truncated {
		trunc = fmt.Sprintf(", truncated: %d bytes omitted", o.OmittedBytes)
	}
	fmt.Fprintf(w, "%s   (%d bytes%s)\n", name, o.Bytes, trunc)
	s := strings.TrimRight(o.String(), "\n")
	if s == "" {
		return
	}
	for _, line := range strings.Split(s, "\n") {
		fmt.Fprintf(w, "  | %s\n", line)
	}
}

// breakdown says where a job's time went, from the result's timestamps.
func breakdown(r job.Result) string {
	var parts []string
	add := func(name string, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %s", name, to.Sub(from).Round(100*time.Microsecond)))
		}
	}
	add("submit→queued", r.SubmittedAt, r.QueuedAt)
	if !r.QueuedAt.IsZero() {
		add("queue wait", r.QueuedAt, r.StartedAt)
	} else {
		add("submit→start", r.SubmittedAt, r.StartedAt)
	}
	add("run", r.StartedAt, r.FinishedAt)
	add("total", r.SubmittedAt, r.FinishedAt)
	return strings.Join(parts, " · ")
}

func runTime(r job.Result) string {
	if r.StartedAt.IsZero() || r.FinishedAt.IsZero() {
		return "-"
	}
	return r.FinishedAt.Sub(r.StartedAt).Round(time.Millisecond).String()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
