package job

import (
	"encoding/base64"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Agent I/O: what goes into a job besides its command (files, stdin), what
// comes out besides its result (live output, the full output kept,
// artifacts), and where each lives in NATS. Every one of them belongs to
// the job's tenant: the tenant's credentials (package tenant) reach only
// the tenant's own output stream and object buckets.

// OutputPolicy is what a job asks for its output.
type OutputPolicy struct {
	// Keep stores the complete stdout and stderr in the tenant's output
	// bucket (OutBucket); absent means the operator's default.
	Keep *bool `json:"keep,omitempty"`
	// Spill writes the complete stdout and stderr of each command into the
	// job's workspace as it runs, at SpillPath (the agent gateway's capped
	// answers point there). It needs a writable volume, and counts against
	// the volume's max_bytes.
	Spill bool `json:"spill,omitempty"`
}

// SpillDir is the directory, relative to the workspace, that spilled
// output goes to; SpillPath(id, stream) is the file of one stream.
const SpillDir = ".paddock/out"

// SpillPath is where a job's spilled stream ("stdout" or "stderr") lands,
// as the box sees it: /workspace/.paddock/out/<id>.<stream>.
func SpillPath(id, stream string) string {
	return "/workspace/" + SpillDir + "/" + id + "." + stream
}

// Spilled is the output a job spilled into its workspace (OutputPolicy.Spill).
type Spilled struct {
	Stdout SpillFile `json:"stdout"`
	Stderr SpillFile `json:"stderr"`
}

// SpillFile is one spilled stream: its path in the box, the bytes written,
// and, when not every byte could be written (the volume's quota, the fsize
// limit, a full disk), why.
type SpillFile struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
}

// File is one file written under the job's workspace before its first
// command: inline (ContentB64) or by reference to an object the tenant
// uploaded to its input bucket (Ref; `paddock put`).
type File struct {
	// Path is relative to the workspace (CheckPath).
	Path       string `json:"path"`
	ContentB64 string `json:"content_b64,omitempty"`
	Ref        string `json:"ref,omitempty"`
	// Mode is the octal permission ("0644", default; 0400..0777, no
	// setuid, setgid or sticky bits).
	Mode string `json:"mode,omitempty"`
}

// Object is one object a job left in its tenant's output bucket.
type Object struct {
	// Name is the object's name in OutBucket(tenant).
	Name string `json:"name"`
	// Path is, for an artifact, its path under the workspace.
	Path   string `json:"path,omitempty"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Truncated: the job printed more than the per-job cap; Bytes were kept.
	Truncated bool `json:"truncated,omitempty"`
	// Note says what was cut or not kept, and why.
	Note string `json:"note,omitempty"`
}

// Kept names the objects holding a job's complete output. An Object with an
// empty Name was not kept; its Note says why.
type Kept struct {
	Stdout Object `json:"stdout"`
	Stderr Object `json:"stderr"`
}

// Refusal is one file an artifact pattern matched that was not collected,
// or one pattern that stopped early, with the reason.
type Refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Fixed bounds of agent I/O in a spec (operator caps are in Caps).
const (
	MaxFiles            = 100
	MaxPathBytes        = 1024
	MaxPathElem         = 255
	MaxRefBytes         = 255
	MaxArtifactPatterns = 32
	// MaxStdinBytes bounds stdin; larger input goes in a file.
	MaxStdinBytes = 64 << 10
	// DefaultInlineBytes is the default cap of all inline file contents of
	// one job (decoded); a spec is at most MaxSpecBytes, base64 adds a third.
	DefaultInlineBytes = 128 << 10
	// MaxVolumeBytes bounds volume.max_bytes (1 TiB): a typo guard.
	MaxVolumeBytes = 1 << 40
)

// Subjects, streams and buckets of agent I/O.
const (
	// SubjectOutputPrefix + tenant + "." + id carries a job's live output.
	SubjectOutputPrefix = "paddock.output."
	// StreamOutputPrefix + tenant is the tenant's stream of live output
	// chunks (short retention; the full copy is in OutBucket).
	StreamOutputPrefix = "PADDOCK_OUTPUT_"
	// OutBucketPrefix + tenant is the Object Store bucket the workers write
	// kept output and artifacts to; the tenant may only read it.
	OutBucketPrefix = "paddock_out_"
	// InBucketPrefix + tenant is the bucket the tenant uploads input files
	// to (File.Ref); the workers read it.
	InBucketPrefix = "paddock_in_"
)

// Headers of a live output chunk. The body is the chunk's bytes.
const (
	// HeaderOutStream is "stdout" or "stderr".
	HeaderOutStream = "Paddock-Stream"
	// HeaderOutSeq numbers a run's chunks from 1, in order.
	HeaderOutSeq = "Paddock-Seq"
	// HeaderOutRun is the run of the job (Result.Runs) the chunk is from.
	HeaderOutRun = "Paddock-Run"
	// HeaderOutSkipped counts bytes of this stream dropped just before this
	// chunk (the job printed faster than the live rate bound).
	HeaderOutSkipped = "Paddock-Skipped"
	// HeaderOutEnd marks the last message of a job's live output (empty
	// body); its value is the job's reason.
	HeaderOutEnd = "Paddock-End"
)

// OutputSubject is the subject of the live output of tenant's job id.
func OutputSubject(tenant, id string) string {
	return SubjectOutputPrefix + orDefault(tenant) + "." + subjectSuffix(id)
}

// OutputSubjects is the wildcard of every live output subject of tenant.
func OutputSubjects(tenant string) string { return SubjectOutputPrefix + orDefault(tenant) + ".>" }

// OutputStream is the name of tenant's live output stream.
func OutputStream(tenant string) string { return StreamOutputPrefix + orDefault(tenant) }

// OutBucket is the name of tenant's output bucket.
func OutBucket(tenant string) string { return OutBucketPrefix + orDefault(tenant) }

// InBucket is the name of tenant's input bucket.
func InBucket(tenant string) string { return InBucketPrefix + orDefault(tenant) }

// Object names in OutBucket, per run of the job (Result.Runs): run 1 (and
// 0, a job not run) writes <id>/stdout, <id>/stderr and
// <id>/artifacts/<path>; run n > 1 writes under <id>/run<n>/. A stale run
// (one a rescue replaced, which may still be uploading when it resumes)
// so never writes the objects the recorded result names: readers follow
// the result's Object.Name.
func StdoutObject(id string, run int) string { return runDir(id, run) + "stdout" }
func StderrObject(id string, run int) string { return runDir(id, run) + "stderr" }

// ArtifactObject is the object name of the artifact at path of run run of
// job id.
func ArtifactObject(id string, run int, path string) string {
	return runDir(id, run) + "artifacts/" + path
}

func runDir(id string, run int) string {
	if run <= 1 {
		return id + "/"
	}
	return id + "/run" + strconv.Itoa(run) + "/"
}

// CheckPath reports whether p can name a file under the workspace: a
// relative, clean path of valid UTF-8 of at most MaxPathBytes, elements of
// at most MaxPathElem bytes, no "." or ".." element, no empty element, no
// control character (newlines included), nothing under ".paddock/" (the
// spill files of sessions). It returns a message for the caller's field.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("must not be empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("is %d bytes; at most %d allowed", len(p), MaxPathBytes)
	case !utf8.ValidString(p):
		return fmt.Errorf("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q must be relative to the workspace, not absolute", Truncate(p, 60))
	case strings.ContainsFunc(p, unicode.IsControl):
		return fmt.Errorf("%q contains a control character (such as a newline)", Truncate(p, 60))
	}
	for _, e := range strings.Split(p, "/") {
		switch {
		case e == "" || e == ".":
			return fmt.Errorf("%q has an empty or '.' element; write a clean path", Truncate(p, 60))
		case e == "..":
			return fmt.Errorf("%q must not contain '..'", Truncate(p, 60))
		case len(e) > MaxPathElem:
			return fmt.Errorf("has an element of %d bytes; at most %d allowed", len(e), MaxPathElem)
		}
	}
	if p == ".paddock" || strings.HasPrefix(p, ".paddock/") {
		return fmt.Errorf("%q is under .paddock/, which Paddock keeps for itself", Truncate(p, 60))
	}
	return nil
}

// CheckPattern reports whether p is a valid artifact pattern: a path as
// CheckPath allows whose elements may hold the wildcards of path.Match
// (*, ?, [...], \ escapes) or be "**" (any number of directories). Each
// element must be a pattern path.Match accepts, so that collecting never
// meets a syntax error.
func CheckPattern(p string) error {
	if err := CheckPath(p); err != nil {
		return err
	}
	for _, e := range strings.Split(p, "/") {
		if e == "**" {
			continue
		}
		// path.Match checks the syntax of the whole pattern, whatever the name.
		if _, err := path.Match(e, ""); err != nil {
			return fmt.Errorf("%q: element %q is not a valid pattern; use *, ?, [abc], [a-z], [^a-z] and \\ to escape", Truncate(p, 60), Truncate(e, 60))
		}
	}
	return nil
}

// CheckRef reports whether r can name an object of an input bucket: 1 to
// MaxRefBytes of [A-Za-z0-9._/-], no '..', not starting with '/'.
func CheckRef(r string) error {
	if r == "" || len(r) > MaxRefBytes {
		return fmt.Errorf("must be 1 to %d bytes", MaxRefBytes)
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; !idByte(c) && c != '.' && c != '/' {
			return fmt.Errorf("%q: use [A-Za-z0-9._/-]", Truncate(r, 60))
		}
	}
	if strings.HasPrefix(r, "/") || strings.Contains(r, "..") {
		return fmt.Errorf("%q must not start with '/' or contain '..'", Truncate(r, 60))
	}
	return nil
}

// ParseMode reads a File.Mode: "" is 0644; otherwise an octal number in
// 0400..0777 (an owner-readable file with plain permission bits).
func ParseMode(s string) (uint32, error) {
	if s == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) > 4 {
		return 0, fmt.Errorf("%q is not an octal mode such as \"0644\"", Truncate(s, 20))
	}
	if m > 0o777 || m&0o400 == 0 {
		return 0, fmt.Errorf("%q is out of range; allowed 0400..0777 (owner-readable, no setuid, setgid or sticky bit)", s)
	}
	return uint32(m), nil
}

// checkIO checks files, stdin, artifacts and the output policy: at most
// MaxFiles files (checkFiles); stdin of at most MaxStdinBytes of valid
// UTF-8 without NUL (a Go-built spec must not change on the wire); at most
// MaxArtifactPatterns valid patterns; output.keep only where the operator
// keeps output.
func (v *validator) checkIO(s *Spec, caps Caps) {
	v.checkFiles(s, caps)
	if len(s.Stdin) > MaxStdinBytes {
		v.add("stdin", fmt.Sprintf("is %d bytes; at most %d allowed (send larger input as a file)", len(s.Stdin), MaxStdinBytes))
	} else {
		v.text("stdin", s.Stdin, 0, MaxStdinBytes)
	}
	patterns := s.Artifacts
	if len(patterns) > MaxArtifactPatterns {
		v.add("artifacts", fmt.Sprintf("%d patterns; at most %d allowed", len(patterns), MaxArtifactPatterns))
		patterns = nil
	}
	for i, p := range patterns {
		if err := CheckPattern(p); err != nil {
			v.add(fmt.Sprintf("artifacts[%d]", i), err.Error())
		}
	}
	if s.Output != nil && s.Output.Spill && (s.Volume == nil || s.Volume.Mode == VolumeRO) {
		v.add("output.spill", "spilled output goes into the workspace: mount a volume rw")
	}
	if s.Output != nil && s.Output.Keep != nil && *s.Output.Keep && caps.NoKeep {
		v.add("output.keep", "this fleet does not keep full output (the operator turned it off)")
	}
}

// checkFiles checks the files: at most MaxFiles with distinct valid paths,
// none under another (a path cannot be both a file and a directory), each
// inline or by reference (not both), inline contents of at most
// caps.MaxInlineBytes in all. Files need a writable workspace.
func (v *validator) checkFiles(s *Spec, caps Caps) {
	if len(s.Files) > MaxFiles {
		// Each file is not checked then: the error list stays short.
		v.add("files", fmt.Sprintf("%d files; at most %d allowed (pack more in an archive)", len(s.Files), MaxFiles))
		return
	}
	if len(s.Files) > 0 && s.Volume != nil && s.Volume.Mode == VolumeRO {
		v.add("files", "the workspace is the read-only volume; mount it rw or send no files")
	}
	paths := make(map[string]bool, len(s.Files)) // the valid paths
	var inline int64
	for i, f := range s.Files {
		field := fmt.Sprintf("files[%d]", i)
		if err := CheckPath(f.Path); err != nil {
			v.add(field+".path", err.Error())
		} else if paths[f.Path] {
			v.add(field+".path", fmt.Sprintf("%q is given twice", Truncate(f.Path, 60)))
		} else {
			paths[f.Path] = true
		}
		inline += v.checkFile(field, f)
	}
	for i, f := range s.Files {
		if !paths[f.Path] {
			continue
		}
		if dir := fileAncestor(f.Path, paths); dir != "" {
			v.add(fmt.Sprintf("files[%d].path", i), fmt.Sprintf("%q is under %q, which is a file of this job too", Truncate(f.Path, 60), Truncate(dir, 60)))
		}
	}
	if inline > caps.MaxInlineBytes {
		v.add("files", fmt.Sprintf("inline contents are %d bytes; at most %d allowed: upload larger files with `paddock put` and give them by ref", inline, caps.MaxInlineBytes))
	}
}

// checkFile checks one file's mode and source and returns its decoded
// inline size.
func (v *validator) checkFile(field string, f File) int64 {
	if _, err := ParseMode(f.Mode); err != nil {
		v.add(field+".mode", err.Error())
	}
	switch {
	case f.Ref != "" && f.ContentB64 != "":
		v.add(field, "give content_b64 or ref, not both")
	case f.Ref != "":
		if err := CheckRef(f.Ref); err != nil {
			v.add(field+".ref", err.Error())
		}
	default:
		n, err := base64.StdEncoding.DecodeString(f.ContentB64)
		if err != nil {
			v.add(field+".content_b64", "is not standard base64 (RFC 4648, with padding)")
		}
		return int64(len(n))
	}
	return 0
}

// fileAncestor returns the nearest proper ancestor directory of p that is
// in paths, or "".
func fileAncestor(p string, paths map[string]bool) string {
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if paths[p[:i]] {
			return p[:i]
		}
	}
	return ""
}

// KeepOutput reports whether s's output is kept whole: the job's choice,
// else the operator's default.
func KeepOutput(s *Spec, caps Caps) bool {
	if s.Output != nil && s.Output.Keep != nil {
		return *s.Output.Keep && !caps.NoKeep
	}
	return caps.KeepOutput && !caps.NoKeep
}
