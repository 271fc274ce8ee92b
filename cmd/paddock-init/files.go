package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/paddockhq/paddock/sandbox/boxfs"
	"github.com/paddockhq/paddock/sandbox/initproto"
)

// workspaceDir is where put writes and collect reads: the job's workspace
// (sandbox.WorkspaceDir, which init cannot import). Tests point it at a
// temporary directory.
var workspaceDir = "/workspace"

// badFrames ends the box on a frame stream that breaks the protocol, as
// handle does for an unknown frame; tests replace it (die kills every
// process of the machine when it is not a container's init).
var badFrames = func(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "paddock-init: "+format+"\n", args...)
	die(2)
}

// decodeFrame decodes the JSON payload of a request frame; a bad one is a
// protocol error.
func decodeFrame[T any](f frame) T {
	var v T
	if err := json.Unmarshal(f.payload, &v); err != nil {
		badFrames("bad %q request: %v", f.typ, err)
	}
	return v
}

// put writes the file of req from the req.Size bytes of TypeData frames
// that follow it on frames, and answers TypePutDone. The file is created
// by init itself, so it belongs to the box's user. Whatever happens to the
// write, every data frame of the put is read, so the next frame is a
// request again; a frame of another type among them, or more bytes than
// req.Size, is a protocol error.
func (p *initProc) put(req initproto.Put, frames <-chan frame) {
	if req.Size < 0 {
		badFrames("put %q: size %d", req.Path, req.Size)
		return
	}
	data := &dataReader{frames: frames, left: req.Size}
	var done initproto.PutDone
	if root, err := boxfs.Open(workspaceDir); err != nil {
		done.Error = "the workspace cannot be opened: " + reason(err)
	} else {
		if err := root.WriteFile(req.Path, req.Mode, req.Size, data); err != nil {
			done.Error = reason(err)
		}
		root.Close()
	}
	data.drain()
	b, _ := json.Marshal(done)
	p.send(initproto.TypePutDone, b)
}

// reason is what a user is told of a boxfs error.
func reason(err error) string {
	var pe *boxfs.PathError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return err.Error()
}

// dataReader reads the bytes of a put out of its TypeData frames.
type dataReader struct {
	frames <-chan frame
	left   int64  // bytes of the put not yet taken from a frame
	buf    []byte // bytes of the last frame not yet read
}

func (d *dataReader) Read(b []byte) (int, error) {
	for len(d.buf) == 0 {
		if d.left == 0 {
			return 0, io.EOF
		}
		d.next()
	}
	n := copy(b, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

// next takes the next data frame.
func (d *dataReader) next() {
	f, ok := <-d.frames
	switch {
	case !ok:
		badFrames("put: the frames ended with %d bytes to come", d.left)
	case f.typ != initproto.TypeData:
		badFrames("put: frame %q with %d bytes of data to come", f.typ, d.left)
	case int64(len(f.payload)) > d.left:
		badFrames("put: a data frame of %d bytes with only %d to come", len(f.payload), d.left)
	}
	d.left -= int64(len(f.payload))
	d.buf = f.payload
}

// drain reads the data frames the writer did not take.
func (d *dataReader) drain() {
	d.buf = nil
	for d.left > 0 {
		d.next()
	}
	d.buf = nil
}

// collect sends the files of the workspace that match req, each as
// TypeFileHdr, TypeFileData chunks of at most initproto.ChunkSize and
// TypeFileEnd (Refused set when it changed while read: the worker drops
// its bytes), then a TypeRefused per path not collected (those that
// changed included), then TypeCollected. A workspace that does not exist
// holds no file.
func (p *initProc) collect(req initproto.Collect) {
	var res initproto.Collected
	root, err := boxfs.Open(workspaceDir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			p.sendJSON(initproto.TypeRefused, initproto.Refusal{Path: ".", Reason: "the workspace cannot be opened: " + reason(err)})
		}
		p.sendJSON(initproto.TypeCollected, res)
		return
	}
	defer root.Close()
	lim := boxfs.Limits{MaxFiles: req.MaxFiles, MaxFileBytes: req.MaxFileBytes, MaxTotalBytes: req.MaxTotalBytes, MaxVisit: req.MaxVisit}
	buf := make([]byte, initproto.ChunkSize)
	refused, st, err := root.Collect(req.Patterns, lim, func(f boxfs.File, r io.Reader) error {
		return p.sendFile(f, r, buf)
	})
	for _, r := range refused {
		p.sendJSON(initproto.TypeRefused, initproto.Refusal{Path: r.Path, Reason: r.Reason})
	}
	if err != nil {
		p.sendJSON(initproto.TypeRefused, initproto.Refusal{Path: ".", Reason: "collection stopped: " + err.Error()})
	}
	res.Files, res.Bytes, res.Visited = st.Files, st.Bytes, st.Visited
	p.sendJSON(initproto.TypeCollected, res)
}

// sendFile sends one collected file; the error is the reader's, which
// Collect turns into a refusal.
func (p *initProc) sendFile(f boxfs.File, r io.Reader, buf []byte) error {
	p.sendJSON(initproto.TypeFileHdr, initproto.FileHdr{Path: f.Path, Size: f.Size, Mode: f.Mode})
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.send(initproto.TypeFileData, buf[:n])
		}
		if err == io.EOF {
			p.sendJSON(initproto.TypeFileEnd, initproto.FileEnd{})
			return nil
		}
		if err != nil {
			p.sendJSON(initproto.TypeFileEnd, initproto.FileEnd{Refused: reason(err)})
			return err
		}
	}
}

func (p *initProc) sendJSON(typ byte, v any) {
	b, _ := json.Marshal(v)
	p.send(typ, b)
}
