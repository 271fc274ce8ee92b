package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/sandbox"
	"github.com/paddockhq/paddock/sandbox/boxfs"
)

// JobIO is where a job's agent I/O goes (*results.IO): its live output,
// its kept output and artifacts, and its input files by reference, each in
// the job's tenant's own stream or bucket.
// *results.IO satisfies it through ResultsIO; a test can fake every part.
type JobIO interface {
	Live(tenant, id string, run int) LiveOutput
	Keep(ctx context.Context, tenant, name string) KeptOutput
	Input(ctx context.Context, tenant, ref string) (io.ReadCloser, int64, error)
	Put(ctx context.Context, tenant, name string, r io.Reader) (job.Object, error)
	Delete(ctx context.Context, tenant, name string) error
}

// LiveOutput is one run's live output (*results.Live): Write never blocks
// the command, Close ends the stream with the job's reason.
type LiveOutput interface {
	Write(stream int, p []byte)
	Close(reason job.Reason)
}

// KeptOutput is one stream's complete output being kept (*results.Keeper):
// Close stores it and says what was stored.
type KeptOutput interface {
	io.Writer
	Close() job.Object
}

// ResultsIO is x as a JobIO (nil stays nil).
func ResultsIO(x *results.IO) JobIO {
	if x == nil {
		return nil
	}
	return resultsIO{x}
}

type resultsIO struct{ *results.IO }

func (r resultsIO) Live(tenant, id string, run int) LiveOutput { return r.IO.Live(tenant, id, run) }

func (r resultsIO) Keep(ctx context.Context, tenant, name string) KeptOutput {
	return r.IO.Keep(ctx, tenant, name)
}

// ArtifactCaps bound what one job's artifacts may take. A zero field takes
// its default.
type ArtifactCaps struct {
	MaxFiles      int   // default 100
	MaxFileBytes  int64 // default 64 MiB
	MaxTotalBytes int64 // default 256 MiB
	// MaxVisit bounds the workspace entries looked at (default 100,000).
	MaxVisit int
}

func (c ArtifactCaps) withDefaults() ArtifactCaps {
	c.MaxFiles = cmp.Or(c.MaxFiles, 100)
	c.MaxFileBytes = cmp.Or(c.MaxFileBytes, 64<<20)
	c.MaxTotalBytes = cmp.Or(c.MaxTotalBytes, 256<<20)
	c.MaxVisit = cmp.Or(c.MaxVisit, 100_000)
	return c
}

// runIO is one run's agent I/O: the live output of every command, the kept
// output of the last command that was not an install, and the command's
// stdin.
type runIO struct {
	x      JobIO
	tenant string
	id     string
	live   LiveOutput
	keep   bool
	stdin  []byte
	rate   int64
	kill   int64 // output kill limit of a kept command
	kept   *job.Kept
	run    int // the run's number (Result.Runs): it names the kept objects
}

// newRunIO starts r's live output (when the worker has agent I/O).
func (w *Worker) newRunIO(r *jobRun) *runIO {
	rio := &runIO{x: w.cfg.IO, tenant: r.spec.Tenant, id: r.res.ID, run: r.res.Runs, stdin: []byte(r.spec.Stdin),
		keep: r.eff.KeepOutput, rate: w.cfg.OutputRate, kill: w.cfg.KeptOutputKill}
	if w.cfg.IO != nil && !w.cfg.NoLiveOutput {
		rio.live = w.cfg.IO.Live(rio.tenant, rio.id, r.res.Runs)
	}
	return rio
}

// command fills c's output hooks and stdin for one command, and returns
// what to call when it ended.
func (rio *runIO) command(ctx context.Context, c *sandbox.Command, hc healer.Command) (ended func()) {
	if rio == nil {
		return func() {}
	}
	if !hc.Install {
		c.Stdin = rio.stdin
	}
	var keepers [2]KeptOutput
	if rio.keep && rio.x != nil && !hc.Install {
		keepers[0] = rio.x.Keep(ctx, rio.tenant, job.StdoutObject(rio.id, rio.run))
		keepers[1] = rio.x.Keep(ctx, rio.tenant, job.StderrObject(rio.id, rio.run))
		c.OutputKill = rio.kill
	}
	if rio.live == nil && keepers[0] == nil {
		return func() {}
	}
	c.StreamAll, c.RateBytes = true, rio.rate
	live := rio.live
	c.OnOutput = func(st sandbox.Stream, p []byte) {
		i := int(st) - 1
		if live != nil {
			live.Write(i, p)
		}
		if keepers[i] != nil {
			_, _ = keepers[i].Write(p)
		}
	}
	return func() {
		if keepers[0] != nil {
			rio.kept = &job.Kept{Stdout: keepers[0].Close(), Stderr: keepers[1].Close()}
		}
	}
}

// end closes the live output: with the job's reason after its result was
// recorded, or "" (no end marker) when the job will run again.
func (rio *runIO) end(reason job.Reason) {
	if rio != nil && rio.live != nil {
		rio.live.Close(reason)
		rio.live = nil
	}
}

// traced runs f in a span named name when on (else just runs it); f's
// span (trace.SpanFromContext) takes the step's attributes.
func (w *Worker) traced(ctx context.Context, name string, on bool, f func(context.Context) error) error {
	if !on {
		return f(ctx)
	}
	ctx, span := w.tr.Start(ctx, name)
	err := f(ctx)
	endSpan(span, err)
	return err
}

// errBadBase64: an inline file's content is not base64 (validation
// refuses it first; a worker never trusts the queue).
var errBadBase64 = errors.New("is not standard base64 (RFC 4648, with padding)")

// errNoStore ends a job that needs the object store on a worker without one.
var errNoStore = errors.New("this worker has no object store (it runs without NATS agent I/O); files by ref, kept output and artifacts need one")

// placeFiles writes the job's files into its workspace before its first
// command. A file the job's input gets wrong (a missing ref, a path init
// refuses, a full workspace) is the job's failure, returned as a
// *job.ValidationError naming the file; other errors are the sandbox's.
func (w *Worker) placeFiles(ctx context.Context, r *jobRun, sess *sandbox.Session) error {
	var placed int
	var total int64
	defer func() {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int(job.AttrFiles, placed), attribute.Int64(job.AttrFilesBytes, total))
	}()
	for i, f := range r.spec.Files {
		field := fmt.Sprintf("files[%d]", i)
		mode, err := job.ParseMode(f.Mode)
		if err != nil {
			return fileError(field+".mode", err.Error())
		}
		src, size, err := w.fileSource(ctx, r.spec.Tenant, f)
		if err != nil {
			switch {
			case errors.Is(err, errBadBase64):
				return fileError(field+".content_b64", err.Error())
			case errors.Is(err, results.ErrNotFound) || errors.Is(err, errNoStore):
				return fileError(field+".ref", err.Error())
			}
			return err
		}
		err = sess.PutFile(ctx, f.Path, mode, size, src)
		src.Close()
		placed, total = placed+1, total+size
		var fe *sandbox.FileError
		if errors.As(err, &fe) {
			return fileError(field+".path", fmt.Sprintf("%q: %s", f.Path, fe.Reason))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fileSource opens a file's content: inline, or from the tenant's input
// bucket.
func (w *Worker) fileSource(ctx context.Context, tenant string, f job.File) (io.ReadCloser, int64, error) {
	if f.Ref == "" {
		b, err := base64.StdEncoding.DecodeString(f.ContentB64)
		if err != nil {
			return nil, 0, errBadBase64
		}
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	if w.cfg.IO == nil {
		return nil, 0, errNoStore
	}
	return w.cfg.IO.Input(ctx, tenant, f.Ref)
}

func fileError(field, msg string) error {
	return &job.ValidationError{Fields: []job.FieldError{{Field: field, Message: msg}}}
}

// collectArtifacts stores the workspace's files matching the job's
// patterns in the tenant's output bucket, and lists them and the refused
// ones on the result. A failure of the store refuses the file (the result
// says why); only a failure of the sandbox is returned.
func (w *Worker) collectArtifacts(ctx context.Context, r *jobRun, sess *sandbox.Session) error {
	if len(r.spec.Artifacts) == 0 {
		return nil
	}
	if w.cfg.IO == nil {
		r.res.Refused = append(r.res.Refused, job.Refusal{Path: strings.Join(r.spec.Artifacts, " "), Reason: errNoStore.Error()})
		return nil
	}
	c := w.cfg.Artifacts
	tenant, id := r.spec.Tenant, r.res.ID
	refused, _, err := sess.Collect(ctx, sandbox.CollectRequest{
		Patterns: r.spec.Artifacts, MaxFiles: c.MaxFiles, MaxFileBytes: c.MaxFileBytes,
		MaxTotalBytes: c.MaxTotalBytes, MaxVisit: c.MaxVisit,
	}, func(f sandbox.Collected, rd io.Reader) error {
		if err := job.CheckPath(f.Path); err != nil {
			_, _ = io.Copy(io.Discard, rd)
			return fmt.Errorf("not a valid artifact path: %v", err)
		}
		obj, err := w.cfg.IO.Put(ctx, tenant, job.ArtifactObject(id, r.res.Runs, f.Path), rd)
		if err != nil {
			_ = w.cfg.IO.Delete(ctx, tenant, job.ArtifactObject(id, r.res.Runs, f.Path))
			if errors.Is(err, sandbox.ErrChanged) {
				return err
			}
			return fmt.Errorf("not stored: %v", err)
		}
		obj.Path = f.Path
		r.res.Artifacts = append(r.res.Artifacts, obj)
		return nil
	})
	for _, f := range refused {
		r.res.Refused = append(r.res.Refused, job.Refusal{Path: printable(f.Path), Reason: f.Reason})
	}
	var stored int64
	for _, a := range r.res.Artifacts {
		stored += a.Bytes
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int(job.AttrArtifacts, len(r.res.Artifacts)),
		attribute.Int64(job.AttrArtifactsBytes, stored), attribute.Int(job.AttrArtifactsRefused, len(r.res.Refused)))
	return err
}

// printable is boxfs.Printable of a refused path (init sends them
// escaped already; the worker does not rely on it), cut to
// job.MaxPathBytes; "" (init's summary of refusals past its cap) stays "".
func printable(s string) string {
	if s == "" {
		return ""
	}
	return boxfs.Printable(s[:min(len(s), job.MaxPathBytes)])
}
