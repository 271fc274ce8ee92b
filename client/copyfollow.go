package client

import (
	"context"
	"fmt"
	"io"

	"github.com/paddockhq/paddock/job"
)

// FollowCopy reports what CopyFollow wrote.
type FollowCopy struct {
	// Chunks counts the chunks of output written (the end marker not
	// counted).
	Chunks int
	// End: the output reached the job's end marker; Reason is then the
	// job's reason.
	End    bool
	Reason job.Reason
}

// CopyFollow writes the live output of the tenant's job id as Follow
// (with opts) yields it: the data of stdout's chunks to stdout, of
// stderr's to stderr, each chunk with one Write. It also writes to stderr,
// each on a line of its own, a marker where the output has a gap:
//
//	[— run 2 of the job —]                                 (the job was run again)
//	[… 3 chunks of run 1 are no longer in the live stream] (they expired)
//	[… 512 bytes skipped on stdout]                        (Chunk.Skipped)
//
// It returns at the end marker, when Follow ends without it (NoWait), or
// at the first error of Follow (such as ErrNoLiveOutput: with no chunk
// written, the job's kept output or its result has its output) or of a
// Write of data; FollowCopy says how far it got either way.
func (c *Client) CopyFollow(ctx context.Context, id string, stdout, stderr io.Writer, opts ...FollowOption) (FollowCopy, error) {
	l := &liveWriter{out: stdout, errw: stderr, next: map[int]int{}}
	var n FollowCopy
	for ch, err := range c.Follow(ctx, id, opts...) {
		if err != nil {
			return n, err
		}
		if ch.End {
			n.End, n.Reason = true, ch.Reason
			return n, nil
		}
		if err := l.chunk(ch); err != nil {
			return n, err
		}
		n.Chunks++
	}
	return n, nil
}

// liveWriter writes chunks: stdout's to out, stderr's and the markers to
// errw, a marker always on a line of its own.
type liveWriter struct {
	out, errw  io.Writer
	errMidLine bool        // errw's last byte was not a newline
	next       map[int]int // run → the chunk seq expected next
	run        int         // the run of the last chunk
}

func (l *liveWriter) mark(format string, args ...any) {
	if l.errMidLine {
		fmt.Fprintln(l.errw)
	}
	fmt.Fprintf(l.errw, format+"\n", args...)
	l.errMidLine = false
}

func (l *liveWriter) chunk(ch Chunk) error {
	if l.run != 0 && ch.Run != l.run {
		l.mark("[— run %d of the job —]", ch.Run)
	}
	l.run = ch.Run
	if want := max(l.next[ch.Run], 1); ch.Seq > want {
		l.mark("[… %d chunks of run %d are no longer in the live stream]", ch.Seq-want, ch.Run)
	}
	l.next[ch.Run] = ch.Seq + 1
	if ch.Skipped > 0 {
		l.mark("[… %d bytes skipped on %s]", ch.Skipped, ch.Stream)
	}
	w := l.out
	if ch.Stream == "stderr" {
		w = l.errw
		if len(ch.Data) > 0 {
			l.errMidLine = ch.Data[len(ch.Data)-1] != '\n'
		}
	}
	_, err := w.Write(ch.Data)
	return err
}
