package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// The bash tool: the one tool of the MCP server. Each call is one job in a
// fresh container with the session's workspace mounted at /workspace; its
// answer is one text capped at Config.AnswerChars, whose cut output points
// at the spill files in the workspace (job.SpillPath).

// bashToolName is the tool's name.
const bashToolName = "bash"

// bashDescription is what an agent reads about the tool: at most 400
// characters (100 tokens at 4 characters a token; TestBashDescription).
const bashDescription = "Runs a bash command in a fresh sandbox container with no network. " +
	"/workspace persists for the whole session; everything else is discarded after each call. " +
	"Output is capped: a cut answer names a file in /workspace holding the full output; " +
	"page it with head, tail, grep or sed -n. timeout_s: seconds per command."

// bashSchema is the tool's input schema, hand written to stay small (its
// size is what every agent pays in its context).
var bashSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"command":{"type":"string"},` +
	`"timeout_s":{"type":"integer","minimum":1,"maximum":300},` +
	`"image":{"type":"string"}},` +
	`"required":["command"],"additionalProperties":false}`)

// bashInput is a call's arguments.
type bashInput struct {
	Command  string `json:"command"`
	TimeoutS int64  `json:"timeout_s,omitempty"`
	Image    string `json:"image,omitempty"`
}

// bashTool is the tool's definition.
func bashTool() *mcp.Tool {
	return &mcp.Tool{Name: bashToolName, Description: bashDescription, InputSchema: bashSchema}
}

// cancelTimeout bounds the Cancel of a job whose caller went away.
const cancelTimeout = 10 * time.Second

// runBash runs one bash call of session ref and returns its answer. Every
// failure is an answer with IsError set, never a protocol error.
func (g *Gateway) runBash(ctx context.Context, ref SessionRef, in bashInput) *mcp.CallToolResult {
	s, err := g.touch(ctx, ref)
	if err != nil {
		return g.toolError("the session's workspace is unavailable: " + err.Error())
	}
	c, err := g.cfg.Clients.Client(ctx, ref.Tenant)
	if err != nil {
		return g.toolError(fmt.Sprintf("cannot act as tenant %s: %v; retry later", ref.Tenant, err))
	}
	spec := g.bashSpec(s, in)
	if _, err := c.Submit(ctx, spec); err != nil {
		var ve *job.ValidationError
		if errors.As(err, &ve) {
			return g.toolError("rejected before it ran: " + ve.Error())
		}
		// The publish may have reached JetStream (a lost ack): cancel the
		// id, so that the job never runs against the workspace unseen.
		return g.abandon(ctx, c, spec.ID, "it may not have been submitted ("+err.Error()+")")
	}
	log := g.log.With("tenant", ref.Tenant, "session", ref.Name, "job", spec.ID)
	wctx, cancel := context.WithTimeout(ctx, g.cfg.MaxWait)
	defer cancel()
	r, err := c.Wait(wctx, spec.ID)
	if err != nil {
		why := fmt.Sprintf("waiting for its result failed (%v)", err)
		switch {
		case ctx.Err() != nil:
			why = "the call was canceled"
		case wctx.Err() != nil:
			why = fmt.Sprintf("no result within %s", g.cfg.MaxWait)
		}
		return g.abandon(ctx, c, spec.ID, why)
	}
	// The call took a while: its end counts as use too, so that the idle
	// clock starts when the agent got its answer.
	if _, err := g.touch(context.WithoutCancel(ctx), ref); err != nil && !errors.Is(err, ErrSessionEnding) {
		log.Warn("refresh the session after a command", "err", err)
	}
	text, isErr := formatAnswer(r, g.cfg.AnswerChars)
	log.Debug("bash", "reason", r.Reason, "answer_chars", utf8.RuneCountInString(text))
	return &mcp.CallToolResult{IsError: isErr, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// abandon answers a call whose wait ended without a result (the client
// went away, MaxWait passed, NATS failed): the job is canceled so that it
// does not run later against the workspace unseen.
func (g *Gateway) abandon(ctx context.Context, c *client.Client, id, why string) *mcp.CallToolResult {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	reply, err := c.Cancel(cctx, id)
	if err != nil {
		g.log.Warn("cancel an abandoned bash job", "job", id, "why", why, "err", err)
		return g.toolError(fmt.Sprintf("job %s: %s; canceling it failed too (%v): it may still run, so check the workspace before retrying", id, why, err))
	}
	return g.toolError(fmt.Sprintf("job %s: %s; the job was canceled (%s: %s); retry the command", id, why, reply.Outcome, reply.Message))
}

// bashSpec is the job of one call in session s.
func (g *Gateway) bashSpec(s Session, in bashInput) job.Spec {
	spec := job.Spec{
		ID:      client.NewID(),
		Command: in.Command,
		Image:   in.Image,
		Heal:    &job.HealPolicy{Mode: g.cfg.HealMode},
		Volume:  &job.Volume{Name: s.Volume, Mode: job.VolumeRW, MaxBytes: g.cfg.SessionMaxBytes},
		Output:  &job.OutputPolicy{Spill: true},
		Labels:  map[string]string{LabelSession: s.Name},
	}
	if in.TimeoutS != 0 {
		// The whole job gets the command's timeout: the agent's budget is
		// the wall time of the call, heal attempts included.
		t := in.TimeoutS
		spec.Limits.CommandTimeoutS, spec.Limits.JobTimeoutS = &t, &t
	}
	return spec
}

// LabelSession is the label naming the session of a gateway's job.
const LabelSession = "paddock.session"

// toolError is an error answer of text, capped like any answer.
func (g *Gateway) toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: capRunes(text, g.cfg.AnswerChars)}}}
}

// formatAnswer renders r as a bash answer of at most limit characters
// (runes): a status line, what the healer did, then stdout and stderr with
// the middle of each cut where they do not fit. isErr is true unless the
// command ran to its end (ok or exit_nonzero): a kill, a refusal or an
// infrastructure failure.
func formatAnswer(r job.Result, limit int) (text string, isErr bool) {
	var head strings.Builder
	head.WriteString(statusLine(r) + "\n")
	for _, l := range healLines(r.Attempts) {
		head.WriteString(l + "\n")
	}
	for _, l := range problemLines(r) {
		head.WriteString(l + "\n")
	}
	isErr = r.Reason != job.ReasonOK && r.Reason != job.ReasonExitNonzero
	var spilled [2]*job.SpillFile
	if r.Spilled != nil {
		spilled = [2]*job.SpillFile{&r.Spilled.Stdout, &r.Spilled.Stderr}
	}
	body := renderStreams(stream{"stdout", r.Stdout, spilled[0]}, stream{"stderr", r.Stderr, spilled[1]},
		limit-utf8.RuneCountInString(head.String()))
	if body == "" && !isErr {
		body = "(no output)\n"
	}
	return capRunes(head.String()+body, limit), isErr
}

// statusLine is the answer's first line, such as
// "exit 0 · ok · 1.24 s · job 01J…".
func statusLine(r job.Result) string {
	var parts []string
	if r.ExitCode != nil {
		parts = append(parts, "exit "+strconv.Itoa(*r.ExitCode))
	}
	parts = append(parts, string(r.Reason))
	if d, ok := duration(r); ok {
		parts = append(parts, fmt.Sprintf("%.2f s", d.Seconds()))
	}
	return strings.Join(append(parts, "job "+oneLine(r.ID, 128)), " · ")
}

// duration is how long the job ran: from its start to its end, else the sum
// of its attempts.
func duration(r job.Result) (time.Duration, bool) {
	if !r.StartedAt.IsZero() && r.FinishedAt.After(r.StartedAt) {
		return r.FinishedAt.Sub(r.StartedAt), true
	}
	var ms int64
	for _, a := range r.Attempts {
		ms += a.DurationMS
	}
	return time.Duration(ms) * time.Millisecond, len(r.Attempts) > 0
}

// healLines says what each repair did: "healed: ran `python3 x.py` instead
// of `python x.py` (rules)", or "heal failed: …" when the repaired command
// failed too.
func healLines(as []job.Attempt) []string {
	var out []string
	for i := 1; i < len(as) && i < 3; i++ {
		a, prev := as[i], as[i-1]
		verdict := "healed"
		if a.Reason != job.ReasonOK {
			verdict = "heal failed"
		}
		var did string
		switch {
		case a.Action == job.ActionInstall:
			did = installDone(a.Note) + ", then ran `" + oneLine(a.Command, 100) + "` again"
		case a.Command != prev.Command:
			did = "ran `" + oneLine(a.Command, 100) + "` instead of `" + oneLine(prev.Command, 100) + "`"
		default:
			did = "ran `" + oneLine(a.Command, 100) + "` again"
		}
		out = append(out, verdict+": "+did+" ("+string(a.Action)+")")
	}
	return out
}

// installDone extracts what an install did from its note ("exit 127: "jq"
// not found → installed jq, libjq1 in 31ms; same command again").
func installDone(note string) string {
	_, after, ok := strings.Cut(note, "→ ")
	if !ok {
		return "installed the missing tool"
	}
	what, _, _ := strings.Cut(after, ";")
	return oneLine(strings.TrimSpace(what), 160)
}

// problemLines explain a result that is not a plain exit: the fleet's error
// and field errors (rejected, infra, …) or what limit killed the command.
func problemLines(r job.Result) []string {
	var out []string
	if r.Error != "" {
		out = append(out, "error: "+oneLine(r.Error, 400))
	}
	for i, f := range r.Errors {
		if i == 5 {
			out = append(out, fmt.Sprintf("(and %d more errors)", len(r.Errors)-i))
			break
		}
		out = append(out, oneLine(f.Field+": "+f.Message, 200))
	}
	if hint := killHint(r); hint != "" {
		out = append(out, hint)
	}
	return out
}

// killHint says which limit a killed command met and what to do.
func killHint(r job.Result) string {
	l := r.Limits
	if l == nil {
		l = &job.Effective{}
	}
	switch r.Reason {
	case job.ReasonTimeout:
		return fmt.Sprintf("killed at the timeout (%s): pass a larger timeout_s (at most 300) or do less per call", l.CommandTimeout)
	case job.ReasonFsize:
		return fmt.Sprintf("the workspace is over its quota (%s used): delete files under /workspace", bytesText(r.VolumeBytes))
	case job.ReasonOOM:
		return fmt.Sprintf("out of memory (limit %d MiB)", l.MemoryMB)
	case job.ReasonPidsLimit:
		return fmt.Sprintf("too many processes (limit %d)", l.Pids)
	case job.ReasonOutputCap:
		return "printed more than the output limit: redirect output to a file under /workspace"
	}
	return ""
}

// stream is one output stream of a result and its spill file (nil when
// there is none).
type stream struct {
	name  string
	out   job.Output
	spill *job.SpillFile
}

func (s stream) empty() bool { return s.out.Text == "" && s.out.Tail == "" && s.out.Bytes == 0 }

// whole returns the stream's text when the result holds all of it.
func (s stream) whole() (string, bool) {
	if s.out.Truncated || int64(len(s.out.Text)) < s.out.Bytes {
		return "", false
	}
	return s.out.Text, true
}

// total is the stream's size in bytes.
func (s stream) total() int64 {
	return max(s.out.Bytes, int64(len(s.out.Text)+len(s.out.Tail)))
}

// renderStreams renders stdout, then stderr under a label, in at most
// budget runes: a stream that does not fit is cut in its middle.
func renderStreams(stdout, stderr stream, budget int) string {
	const label = "--- stderr ---\n"
	if stderr.empty() {
		return renderStream(stdout, budget)
	}
	budget -= utf8.RuneCountInString(label)
	if stdout.empty() {
		return label + renderStream(stderr, budget)
	}
	need := func(s stream) int {
		if t, ok := s.whole(); ok {
			return utf8.RuneCountInString(t) + 1 // a newline may be added
		}
		return budget
	}
	no, ne := need(stdout), need(stderr)
	bo, be := budget/2, budget-budget/2
	switch {
	case no+ne <= budget:
		bo, be = no, ne
	case no <= budget/2:
		bo, be = no, budget-no
	case ne <= budget/2:
		bo, be = budget-ne, ne
	}
	return renderStream(stdout, bo) + label + renderStream(stderr, be)
}

// renderStream renders s in at most budget runes (when budget allows a cut
// marker at all), ending with a newline unless empty.
func renderStream(s stream, budget int) string {
	if t, ok := s.whole(); ok && utf8.RuneCountInString(withNL(t)) <= budget {
		return withNL(t)
	}
	// The marker is sized for the largest cut, so the real one fits; the
	// head and the tail may each get a newline.
	room := max(budget-utf8.RuneCountInString(cutMarker(s, s.total()))-2, 0)
	var head, tail string
	if t := s.out.Text; !s.out.Truncated {
		// One text: its head and its tail, never overlapping.
		n := utf8.RuneCountInString(t)
		hn := min(room/2, n)
		head, tail = headRunes(t, hn), tailRunes(t, min(room-hn, n-hn))
	} else {
		// The result's own head and tail: each gets half, or what the
		// other leaves.
		hl, tl := utf8.RuneCountInString(t), utf8.RuneCountInString(s.out.Tail)
		hn := min(room/2, hl)
		tn := min(room-hn, tl)
		hn = min(room-tn, hl)
		head, tail = headRunes(t, hn), tailRunes(s.out.Tail, tn)
	}
	cut := s.total() - int64(len(head)+len(tail))
	return withNL(head) + cutMarker(s, cut) + withNL(tail)
}

// cutMarker is the line that stands for cut bytes of s and says where the
// whole stream is.
func cutMarker(s stream, cut int64) string {
	m := "[… " + bytesCount(cut) + " bytes cut; "
	switch {
	case s.spill == nil || s.spill.Path == "":
		m += "the full " + s.name + " was not saved]"
	case s.spill.Error != "":
		m += "the " + s.name + " file is incomplete (" + oneLine(s.spill.Error, 120) + "): " + oneLine(s.spill.Path, 200) + "]"
	default:
		m += "full " + s.name + ": " + oneLine(s.spill.Path, 200) + " — page it with sed -n '100,200p', grep, tail]"
	}
	return m + "\n"
}

// headRunes is the first n runes of s, cut after the last newline among
// them when that keeps at least half.
func headRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := runeOffset(s, n)
	h := s[:i]
	if i < len(s) {
		if nl := strings.LastIndexByte(h, '\n'); nl >= 0 && utf8.RuneCountInString(h[:nl+1]) >= n/2 {
			h = h[:nl+1]
		}
	}
	return h
}

// tailRunes is the last n runes of s, starting after the first newline
// among them when that keeps at least half.
func tailRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	c := utf8.RuneCountInString(s)
	if n >= c {
		return s
	}
	t := s[runeOffset(s, c-n):]
	if nl := strings.IndexByte(t, '\n'); nl >= 0 && nl+1 < len(t) && utf8.RuneCountInString(t[nl+1:]) >= n/2 {
		t = t[nl+1:]
	}
	return t
}

// runeOffset is the byte offset of the n-th rune of s (len(s) past its end).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// capRunes cuts s to at most n runes, ending in "…" when cut.
func capRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	return s[:runeOffset(s, n-1)] + "…"
}

// oneLine folds s onto one line (runs of white space become one space) of
// at most n runes.
func oneLine(s string, n int) string {
	return capRunes(strings.Join(strings.Fields(s), " "), n)
}

func withNL(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// bytesCount writes n with thousands separators: 1,234,567.
func bytesCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// bytesText is a byte count for people: 12.3 MiB.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return strconv.FormatInt(n, 10) + " B"
}
