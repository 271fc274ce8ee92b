package cli

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how far a batch has got: a bar (schollz/progressbar) on a
// terminal, elsewhere (a pipe, a CI log) a plain line every 10%. A single
// job shows nothing.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	what  string
	total int
	last  int
	bar   *progressbar.ProgressBar
}

func newProgress(w io.Writer, what string, total int) *progress {
	p := &progress{w: w, what: what, total: total, last: -1}
	if f, ok := w.(*os.File); ok && total > 1 && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(fmt.Sprintf("%-9s", what)),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(0),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }))
	}
	return p
}

// update is the callback of client.SubmitBatch and WaitAll; it may be
// called from several goroutines.
func (p *progress) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total <= 1 {
		return
	}
	if p.bar != nil {
		_ = p.bar.Set(done)
		return
	}
	step := done * 10 / max(total, 1)
	if step != p.last {
		p.last = step
		fmt.Fprintf(p.w, "%s %d/%d\n", p.what, done, total)
	}
}

// done ends the bar's line if the batch stopped short (an error).
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !p.bar.IsFinished() {
		_ = p.bar.Exit()
		fmt.Fprintln(p.w)
	}
}
