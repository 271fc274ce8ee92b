package main

import (
	"errors"
	"os"
	"strconv"
	"syscall"

	"github.com/paddockhq/paddock/sandbox/boxfs"
	"github.com/paddockhq/paddock/sandbox/initproto"
)

// spillFile is one stream's spill file: every byte the pump reads is
// written to it, up to max, until a write fails.
type spillFile struct {
	f       *os.File
	written int64
	max     int64 // 0: no bound
	err     string
}

// openSpills opens the spill files of req, if it asks for them; a file
// that cannot be made is recorded in exit and the command runs anyway.
func (c *command) openSpills(req initproto.Request, exit *initproto.Exit) {
	if req.Spill == "" {
		return
	}
	root, err := boxfs.Open(workspaceDir)
	if err != nil {
		exit.SpillErr = [2]string{"the workspace cannot be opened: " + reason(err), "the workspace cannot be opened: " + reason(err)}
		return
	}
	defer root.Close()
	for i, ext := range [2]string{".stdout", ".stderr"} {
		f, err := root.Spill(req.Spill + ext)
		if err != nil {
			exit.SpillErr[i] = reason(err)
			continue
		}
		c.streams[i].spill = &spillFile{f: f, max: req.SpillMax}
	}
}

// write writes p, or what of it fits under the bound; on the first
// failure (EFBIG at the fsize limit, ENOSPC, EDQUOT) it stops for good.
// The command's output is unaffected either way.
func (s *spillFile) write(p []byte) {
	if s == nil || s.f == nil {
		return
	}
	if s.max > 0 && s.written+int64(len(p)) > s.max {
		p = p[:s.max-s.written]
		s.err = "cut at the spill cap"
	}
	n, err := s.f.Write(p)
	s.written += int64(n)
	if err != nil {
		s.err = "write failed after " + strconv.FormatInt(s.written, 10) + " bytes: " + writeProblem(err)
	}
	if s.err != "" {
		s.close()
	}
}

func (s *spillFile) close() {
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
}

// closeSpills closes the spill files and records what they hold.
func (c *command) closeSpills(exit *initproto.Exit) {
	for i, st := range c.streams {
		if st.spill == nil {
			continue
		}
		st.spill.close()
		exit.SpillBytes[i] = st.spill.written
		exit.SpillErr[i] = st.spill.err
	}
}

// writeProblem names why a spill write failed, in the words of the limits.
func writeProblem(err error) string {
	switch {
	case errors.Is(err, syscall.EFBIG):
		return "over the box's file size limit (EFBIG)"
	case errors.Is(err, syscall.ENOSPC):
		return "the workspace's disk is full (ENOSPC)"
	case errors.Is(err, syscall.EDQUOT):
		return "the workspace's disk quota is exhausted (EDQUOT)"
	}
	return reason(err)
}
