package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/job"
)

// Files sent with a job: AttachFiles puts local files in a spec, inline
// while they are small and by reference to an upload (PutFile) otherwise.

var (
	// ErrDuplicatePath: AttachFiles was given two files for one workspace
	// path (a *FileError with Op "path").
	ErrDuplicatePath = errors.New("client: workspace path given twice")
	// ErrNotRegular: AttachFiles was given something other than a regular
	// file (a directory, a device, …); send a directory as an archive.
	ErrNotRegular = errors.New("client: not a regular file")
)

// LocalFile is a file on this machine to be written under a job's
// workspace.
type LocalFile struct {
	// Name is the file's name on this machine.
	Name string
	// Path is where the job gets it, relative to its workspace
	// (job.CheckPath).
	Path string
}

// AttachOptions change what AttachFiles does; the zero value is the
// default.
type AttachOptions struct {
	// InlineBytes caps the content the spec holds inline, all files
	// together (those already in it counted); 0 is job.DefaultInlineBytes,
	// the fleet's default cap (job.Caps.MaxInlineBytes).
	InlineBytes int64
	// Uploaded, when set, is called after each upload.
	Uploaded func(f LocalFile, obj job.Object)
}

// FileError reports the file AttachFiles stopped at; the files before it
// are attached. Op says what failed: "path" (Path is not a workspace path,
// or ErrDuplicatePath), "stat" (the file is not there, or ErrNotRegular),
// "read" (reading it to send it inline) or "upload" (PutFile).
type FileError struct {
	Index int // in AttachFiles' files
	File  LocalFile
	Op    string
	Err   error
}

func (e *FileError) Error() string {
	if e.Op == "path" {
		return fmt.Sprintf("client: attach %s as %q: path %v", e.File.Name, e.File.Path, e.Err)
	}
	return fmt.Sprintf("client: attach %s: %s: %v", e.File.Name, e.Op, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// AttachFiles adds files to spec.Files, in order, each with its
// permission bits (and the owner's read bit): inline (ContentB64) while
// the spec's inline content stays within opts.InlineBytes, and otherwise
// uploaded to the tenant's input bucket first (PutFile, under its default
// ref) and given by reference (Ref). A file that grows past what is left
// of the inline cap while it is read is uploaded instead. It checks each
// Path before it reads the file, and stops at the first failure with a
// *FileError; what was uploaded before stays in the bucket (until it
// expires), and a second AttachFiles of the same file uploads it under the
// same ref.
func (c *Client) AttachFiles(ctx context.Context, spec *job.Spec, files []LocalFile, opts AttachOptions) error {
	limit := opts.InlineBytes
	if limit <= 0 {
		limit = job.DefaultInlineBytes
	}
	var inline int64
	seen := map[string]bool{}
	for _, f := range spec.Files {
		data, _ := base64.StdEncoding.DecodeString(f.ContentB64) // as job.Spec.Validate counts it
		inline += int64(len(data))
		seen[f.Path] = true
	}
	for i, lf := range files {
		fail := func(op string, err error) error { return &FileError{Index: i, File: lf, Op: op, Err: err} }
		if err := job.CheckPath(lf.Path); err != nil {
			return fail("path", err)
		}
		if seen[lf.Path] {
			return fail("path", ErrDuplicatePath)
		}
		seen[lf.Path] = true
		st, err := os.Stat(lf.Name)
		if err != nil {
			return fail("stat", err)
		}
		if !st.Mode().IsRegular() {
			return fail("stat", ErrNotRegular)
		}
		file := job.File{Path: lf.Path, Mode: fmt.Sprintf("%04o", st.Mode().Perm()&0o777|0o400)}
		if inline+st.Size() <= limit {
			data, err := readAtMost(lf.Name, limit-inline)
			if err == nil {
				inline += int64(len(data))
				file.ContentB64 = base64.StdEncoding.EncodeToString(data)
				spec.Files = append(spec.Files, file)
				continue
			}
			if !errors.Is(err, errGrew) {
				return fail("read", err)
			}
		}
		obj, err := c.PutFile(ctx, lf.Name, "")
		if err != nil {
			return fail("upload", err)
		}
		if opts.Uploaded != nil {
			opts.Uploaded(lf, obj)
		}
		file.Ref = obj.Name
		spec.Files = append(spec.Files, file)
	}
	return nil
}

var errGrew = errors.New("the file grew while it was read")

// readAtMost reads file, which must hold at most n bytes.
func readAtMost(file string, n int64) ([]byte, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, n+1))
	if err == nil && int64(len(data)) > n {
		err = errGrew
	}
	return data, err
}

// PutFile uploads the local file name to the tenant's input bucket (Put)
// under ref. An empty ref is the default, in/<sha256>/<base name>, the
// base name with each byte outside [A-Za-z0-9._-] made '_', no "..", and
// at most 180 bytes: the file is then read twice (hashed, then sent), and
// an upload whose sha256 differs from the first read's fails (the file
// changed meanwhile). Errors opening or reading the file are returned as
// the os package gives them.
func (c *Client) PutFile(ctx context.Context, name, ref string) (job.Object, error) {
	fh, err := os.Open(name)
	if err != nil {
		return job.Object{}, err
	}
	defer fh.Close()
	want := ""
	if ref == "" {
		h := sha256.New()
		if _, err := io.Copy(h, fh); err != nil {
			return job.Object{}, err
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			return job.Object{}, err
		}
		want = hex.EncodeToString(h.Sum(nil))
		ref = "in/" + want + "/" + refName(filepath.Base(name))
	}
	obj, err := c.Put(ctx, ref, fh)
	if err == nil && want != "" && obj.SHA256 != want {
		err = fmt.Errorf("%s changed while it was uploaded (sha256 %s, then %s): upload it again", name, want, obj.SHA256)
	}
	return obj, err
}

// refName makes a file name fit an object ref (job.CheckRef): bytes
// outside [A-Za-z0-9._-] become '_', no "..", at most 180 bytes.
func refName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	s := string(b[:min(len(b), 180)])
	for strings.Contains(s, "..") {
		s = strings.ReplaceAll(s, "..", "._")
	}
	if s == "" || s == "." {
		s = "file"
	}
	return s
}
