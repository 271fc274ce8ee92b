package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/paddockhq/paddock/sandbox/initproto"
)

// FileError is init's refusal to write a file (a bad path, a symlink in
// the way, a full workspace): the job's input, not the sandbox, is at
// fault.
type FileError struct {
	Path   string
	Reason string
}

func (e *FileError) Error() string { return fmt.Sprintf("sandbox: file %q: %s", e.Path, e.Reason) }

// ErrChanged is what a collected file's reader returns at its end when
// init found the file changed while it read it: the bytes must be dropped.
var ErrChanged = errors.New("sandbox: file changed while collected")

// PutFile writes the next size bytes of r as the file at path (relative to
// the workspace) with permission mode, before the job's first command. It
// returns a *FileError when init refused the file, an *InfraError when the
// sandbox failed, or r's error (the session is then broken: init was
// promised size bytes).
func (s *Session) PutFile(ctx context.Context, path string, mode uint32, size int64, r io.Reader) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.brokenErr(); err != nil {
		return err
	}
	hdr, _ := json.Marshal(initproto.Put{Path: path, Mode: mode, Size: size})
	if err := s.b.send(initproto.TypePut, hdr); err != nil {
		return infra("put file", err, true)
	}
	if err := s.sendData(ctx, size, r); err != nil {
		s.breakSession(fmt.Errorf("%w: put %q: %v", ErrSessionBroken, path, err))
		return err
	}
	for {
		select {
		case f, ok := <-s.b.frames:
			if !ok {
				return infra("put file", s.b.deathCause(), true)
			}
			if f.typ != initproto.TypePutDone {
				s.breakSession(fmt.Errorf("%w: unexpected frame", ErrSessionBroken))
				return infra("put file", fmt.Errorf("paddock-init sent frame %q to a put; this is a bug in Paddock, please report it", f.typ), false)
			}
			var done initproto.PutDone
			if err := json.Unmarshal(f.payload, &done); err != nil {
				return infra("put file", err, false)
			}
			if done.Error != "" {
				return &FileError{Path: path, Reason: done.Error}
			}
			return nil
		case <-ctx.Done():
			s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, context.Cause(ctx)))
			return context.Cause(ctx)
		}
	}
}

// sendData sends exactly size bytes of r as data frames.
func (s *Session) sendData(ctx context.Context, size int64, r io.Reader) error {
	buf := make([]byte, min(size, initproto.DataChunk))
	for left := size; left > 0; {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		n, err := io.ReadFull(r, buf[:min(left, int64(len(buf)))])
		if n > 0 {
			if serr := s.b.send(initproto.TypeData, buf[:n]); serr != nil {
				return infra("put file", serr, true)
			}
			left -= int64(n)
		}
		if err != nil && left > 0 {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("sandbox: file source ended %d bytes early", left)
			}
			return err
		}
	}
	return nil
}

// Collected is one file init sent from the workspace.
type Collected struct {
	Path string
	Size int64 // as init saw it when it opened the file
	Mode uint32
}

// Refusal is a file init did not collect, or a sink refused, and why.
type Refusal = initproto.Refusal

// CollectRequest asks for a workspace's files (patterns and caps).
type CollectRequest = initproto.Collect

// CollectStats sums up a collection.
type CollectStats = initproto.Collected

// Collect asks init for the workspace's regular files matching req's
// patterns and hands each to sink with a reader of its bytes; sink must
// read it to the end (or return). The reader ends with ErrChanged when
// init found the file changed, and sink must then drop what it got. A sink
// error refuses that file (its message is the reason) and the collection
// goes on. It returns every refusal, init's and the sink's.
func (s *Session) Collect(ctx context.Context, req initproto.Collect, sink func(Collected, io.Reader) error) ([]Refusal, CollectStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st CollectStats
	if err := s.brokenErr(); err != nil {
		return nil, st, err
	}
	payload, _ := json.Marshal(req)
	if err := s.b.send(initproto.TypeCollect, payload); err != nil {
		return nil, st, infra("collect", err, true)
	}
	c := collector{s: s, sink: sink}
	for {
		select {
		case f, ok := <-s.b.frames:
			if !ok {
				c.abort(s.b.deathCause())
				return c.refused, st, infra("collect", s.b.deathCause(), true)
			}
			done, err := c.frame(f, &st)
			if err != nil {
				c.abort(err)
				s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, err))
				return c.refused, st, infra("collect", err, false)
			}
			if done {
				return c.refused, st, nil
			}
		case <-ctx.Done():
			c.abort(context.Cause(ctx))
			s.breakSession(fmt.Errorf("%w: %v", ErrSessionBroken, context.Cause(ctx)))
			return c.refused, st, context.Cause(ctx)
		}
	}
}

// collector follows the frames of one collection: at most one file is
// open at a time, its bytes piped to the sink running on its own goroutine.
type collector struct {
	s       *Session
	sink    func(Collected, io.Reader) error
	refused []Refusal

	cur  *Collected
	left int64
	pw   *io.PipeWriter
	res  chan error
}

// frame handles one frame; done is true at the end of the collection.
func (c *collector) frame(f frame, st *CollectStats) (done bool, err error) {
	switch f.typ {
	case initproto.TypeFileHdr:
		var h initproto.FileHdr
		if err := json.Unmarshal(f.payload, &h); err != nil || c.cur != nil || h.Size < 0 {
			return false, fmt.Errorf("paddock-init sent a bad file header (%v); this is a bug in Paddock, please report it", err)
		}
		c.open(Collected{Path: h.Path, Size: h.Size, Mode: h.Mode})
	case initproto.TypeFileData:
		if c.cur == nil || int64(len(f.payload)) > c.left {
			return false, errors.New("paddock-init sent file data past the file's size; this is a bug in Paddock, please report it")
		}
		c.left -= int64(len(f.payload))
		_, _ = c.pw.Write(f.payload) // after a sink error the bytes are dropped
	case initproto.TypeFileEnd:
		var e initproto.FileEnd
		if err := json.Unmarshal(f.payload, &e); err != nil || c.cur == nil {
			return false, fmt.Errorf("paddock-init sent a bad file end (%v); this is a bug in Paddock, please report it", err)
		}
		c.close(e.Refused)
	case initproto.TypeRefused:
		var r Refusal
		if err := json.Unmarshal(f.payload, &r); err != nil {
			return false, err
		}
		c.refused = append(c.refused, r)
	case initproto.TypeCollected:
		if c.cur != nil {
			return false, errors.New("paddock-init ended a collection inside a file; this is a bug in Paddock, please report it")
		}
		return true, json.Unmarshal(f.payload, st)
	default:
		return false, fmt.Errorf("paddock-init sent frame %q to a collection; this is a bug in Paddock, please report it", f.typ)
	}
	return false, nil
}

func (c *collector) open(h Collected) {
	pr, pw := io.Pipe()
	c.cur, c.left, c.pw, c.res = &h, h.Size, pw, make(chan error, 1)
	go func() {
		err := c.sink(h, pr)
		pr.CloseWithError(errors.New("sandbox: sink returned"))
		c.res <- err
	}()
}

// close ends the open file: the sink's reader reaches EOF, or ErrChanged
// when init refused the file at its end.
func (c *collector) close(refused string) {
	switch {
	case refused != "":
		c.pw.CloseWithError(ErrChanged)
	case c.left > 0:
		c.pw.CloseWithError(io.ErrUnexpectedEOF)
		refused = fmt.Sprintf("ended %d bytes short of its size", c.left)
	default:
		c.pw.Close()
	}
	err := <-c.res
	switch {
	case refused != "" && c.left > 0:
		c.refused = append(c.refused, Refusal{Path: c.cur.Path, Reason: refused})
	case refused != "":
		// init refused the file at its end: its TypeRefused frame follows.
	case err != nil:
		c.refused = append(c.refused, Refusal{Path: c.cur.Path, Reason: err.Error()})
	}
	c.cur = nil
}

// abort ends an open file with err.
func (c *collector) abort(err error) {
	if c.cur != nil {
		c.pw.CloseWithError(err)
		<-c.res
		c.cur = nil
	}
}
