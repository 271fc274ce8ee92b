package cli

// Agent I/O on the command line: submit's --follow, --keep-output,
// --in-file, --artifact and --stdin, and the logs, output, put and
// artifacts commands (client/io.go, attach.go and copyfollow.go do the
// work).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// submitIO are submit's agent I/O flags; they apply to a job given on the
// command line, not to a --file batch (whose specs say it themselves).
type submitIO struct {
	follow, keep, noKeep bool
	inFiles, artifacts   []string
	stdin                string
}

func (f *submitIO) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.follow, "follow", false, "print the job's output live as it runs (stdout to stdout, stderr to stderr), then its result on stderr")
	fs.BoolVar(&f.keep, "keep-output", false, "keep the complete stdout and stderr in the tenant's bucket (for 'paddock output ID')")
	fs.BoolVar(&f.noKeep, "no-keep-output", false, "do not keep the complete output, whatever the operator's default")
	fs.StringArrayVar(&f.inFiles, "in-file", nil, "write local `FILE[:PATH]` under the job's workspace (PATH default: its base name); large files are uploaded first (repeatable)")
	fs.StringArrayVar(&f.artifacts, "artifact", nil, "collect the workspace files matching `PATTERN` (e.g. 'dist/*.whl', 'out/**') after the job (repeatable)")
	fs.StringVar(&f.stdin, "stdin", "", "give the command this `FILE` as its stdin ('-': paddock's own stdin; at most 64 KiB of UTF-8 text)")
}

// set reports whether any flag is given.
func (f *submitIO) set() bool {
	return f.follow || f.keep || f.noKeep || len(f.inFiles) > 0 || len(f.artifacts) > 0 || f.stdin != ""
}

// apply sets what needs no connection: output policy, artifacts, stdin.
func (f *submitIO) apply(s *job.Spec) error {
	switch {
	case f.keep && f.noKeep:
		return errors.New("give --keep-output or --no-keep-output, not both")
	case f.keep || f.noKeep:
		keep := f.keep
		s.Output = &job.OutputPolicy{Keep: &keep}
	}
	for _, p := range f.artifacts {
		if err := job.CheckPattern(p); err != nil {
			return fmt.Errorf("--artifact %q: %v", p, err)
		}
	}
	s.Artifacts = f.artifacts
	if f.stdin == "" {
		return nil
	}
	in, err := readStdin(f.stdin)
	s.Stdin = in
	return err
}

// readStdin reads --stdin: at most job.MaxStdinBytes of UTF-8 (a spec is
// JSON: other bytes would not arrive as they are).
func readStdin(name string) (string, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		fh, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("--stdin: %w", err)
		}
		defer fh.Close()
		r = fh
	}
	data, err := io.ReadAll(io.LimitReader(r, job.MaxStdinBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("--stdin %s: %w", name, err)
	case len(data) > job.MaxStdinBytes:
		return "", fmt.Errorf("--stdin %s: more than %d bytes; send larger input as a file (--in-file LOCAL:PATH) and redirect the command's stdin from it", name, job.MaxStdinBytes)
	case !utf8.Valid(data):
		return "", fmt.Errorf("--stdin %s: not UTF-8 text; send binary input as a file (--in-file LOCAL:PATH)", name)
	}
	return string(data), nil
}

// attach adds the --in-file files to the spec (client.AttachFiles: small
// ones inline, the others uploaded first and given by reference).
func (f *submitIO) attach(ctx context.Context, c *client.Client, s *job.Spec, stderr io.Writer) error {
	files := make([]client.LocalFile, len(f.inFiles))
	for i, v := range f.inFiles {
		files[i].Name, files[i].Path = splitInFile(v)
	}
	err := c.AttachFiles(ctx, s, files, client.AttachOptions{Uploaded: func(lf client.LocalFile, obj job.Object) {
		fmt.Fprintf(stderr, "uploaded %s (%d bytes) as %s\n", lf.Name, obj.Bytes, obj.Name)
	}})
	var fe *client.FileError
	if !errors.As(err, &fe) {
		return err
	}
	switch v, local := f.inFiles[fe.Index], fe.File.Name; {
	case errors.Is(fe.Err, client.ErrDuplicatePath):
		return fmt.Errorf("--in-file %q: %s is given twice", v, fe.File.Path)
	case fe.Op == "path":
		return fmt.Errorf("--in-file %q: path %v", v, fe.Err)
	case errors.Is(fe.Err, client.ErrNotRegular):
		return fmt.Errorf("--in-file %s: not a regular file (send a directory as an archive)", local)
	case fe.Op == "upload":
		return fmt.Errorf("--in-file %s: %w", local, fe.Err)
	}
	return fmt.Errorf("--in-file: %w", fe.Err)
}

// splitInFile splits LOCAL[:PATH] at its last colon; PATH defaults to
// LOCAL's base name.
func splitInFile(v string) (local, dst string) {
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		return v[:i], v[i+1:]
	}
	return v, filepath.Base(v)
}

// newClient connects a client command as its tenant; close releases both.
func (g *globals) newClient(ctx context.Context) (c *client.Client, closeFn func(), err error) {
	nc, tn, err := g.connectClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err = client.New(nc, client.Config{Logger: g.logger, Tenant: tn})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); nc.Close() }, nil
}

// followJob prints a submitted job's live output, then its result on
// stderr (as JSON with -o json), and returns exit status 2 when it did not
// succeed.
func followJob(ctx context.Context, g *globals, f *submitFlags, c *client.Client, id string) error {
	if f.waitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.waitTimeout)
		defer cancel()
	}
	fmt.Fprintf(g.stderr, "job %s submitted; following its output\n", id)
	n, err := c.CopyFollow(ctx, id, g.stdout, g.stderr)
	switch {
	case errors.Is(err, client.ErrNoLiveOutput) && n.Chunks == 0:
		if err := printStored(ctx, g, c, id); err != nil {
			return err
		}
	case errors.Is(err, client.ErrNoLiveOutput):
		fmt.Fprintf(g.stderr, "paddock: the live output of %s ended early (%v); `paddock output %s` has it all when kept\n", id, err, id)
	case err != nil:
		return fmt.Errorf("following %s: %w (the job keeps running; `paddock logs -f %s` resumes)", id, err, id)
	}
	r, err := c.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (the job keeps running; `paddock wait %s` resumes)", id, err, id)
	}
	if f.output == "json" {
		if err := printJSONL(g.stderr, []job.Result{r}); err != nil {
			return err
		}
	} else {
		printSummary(g.stderr, r)
	}
	return jobsExit([]job.Result{r})
}

// printSummary prints a result whose output was shown already: state,
// error, timing, and what was kept.
func printSummary(w io.Writer, r job.Result) {
	exit := ""
	if r.ExitCode != nil {
		exit = fmt.Sprintf(", exit %d", *r.ExitCode)
	}
	fmt.Fprintf(w, "job %s: %s (%s)%s\n", r.ID, r.State, r.Reason, exit)
	if r.Error != "" {
		fmt.Fprintf(w, "error    %s\n", r.Error)
	}
	if b := breakdown(r); b != "" {
		fmt.Fprintf(w, "timing   %s\n", b)
	}
	if r.Kept != nil {
		for _, o := range []struct {
			name, flag string
			obj        job.Object
		}{{"stdout", "", r.Kept.Stdout}, {"stderr", " --stderr", r.Kept.Stderr}} {
			switch {
			case o.obj.Name != "":
				fmt.Fprintf(w, "kept     %s, %d bytes: paddock output %s%s\n", o.name, o.obj.Bytes, r.ID, o.flag)
			case o.obj.Note != "":
				fmt.Fprintf(w, "kept     %s not kept: %s\n", o.name, o.obj.Note)
			}
		}
	}
	if len(r.Artifacts) > 0 || len(r.Refused) > 0 {
		fmt.Fprintf(w, "artifacts %d collected, %d refused: paddock artifacts %s\n", len(r.Artifacts), len(r.Refused), r.ID)
	}
}

// printStored prints what is left of id's output when the live stream
// has none: its kept output, else the text in its result, with a note on
// stderr saying which.
func printStored(ctx context.Context, g *globals, c *client.Client, id string) error {
	rc, err := c.Output(ctx, id, "stdout")
	var nk *client.NotKeptError
	switch {
	case err == nil:
		fmt.Fprintf(g.stderr, "paddock: no live output of %s in the stream; printing its kept output\n", id)
		_, err = io.Copy(g.stdout, rc)
		rc.Close()
		if err != nil {
			return err
		}
		if rc, err = c.Output(ctx, id, "stderr"); err == nil {
			_, err = io.Copy(g.stderr, rc)
			rc.Close()
		}
		if errors.Is(err, client.ErrNotKept) {
			err = nil
		}
		return err
	case errors.As(err, &nk) && !nk.Finished:
		fmt.Fprintf(g.stderr, "paddock: job %s has no live output yet (queued, or nothing printed so far) and no result: `paddock logs -f %s` waits for it\n", id, id)
		return nil
	case !errors.Is(err, client.ErrNotKept):
		return err
	}
	r, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	note := ""
	if r.Stdout.Truncated || r.Stderr.Truncated {
		note = fmt.Sprintf(" (cut: %d bytes of stdout and %d of stderr omitted; submit with --keep-output to keep it all)", r.Stdout.OmittedBytes, r.Stderr.OmittedBytes)
	}
	fmt.Fprintf(g.stderr, "paddock: no live output of %s in the stream and none kept; printing the output in its result%s\n", id, note)
	if _, err := io.WriteString(g.stdout, r.Stdout.String()); err != nil {
		return err
	}
	_, err = io.WriteString(g.stderr, r.Stderr.String())
	return err
}

func logsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [-f] ID",
		Short: "Print a job's output from the live stream (-f: follow it to the end)",
		Long: `logs prints what the tenant's live output stream holds of a job (stdout to
stdout, stderr to stderr) and exits; with -f it follows the output until the
job ends. When the stream has none of it (live output is kept for a short
time), it prints the job's kept output, or else the output in its result,
with a note on stderr saying which.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			c, closeFn, err := g.newClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			var opts []client.FollowOption
			if !follow {
				opts = append(opts, client.NoWait())
			}
			n, err := c.CopyFollow(ctx, id, g.stdout, g.stderr, opts...)
			switch {
			case errors.Is(err, client.ErrNoLiveOutput) && n.Chunks == 0:
				return printStored(ctx, g, c, id)
			case errors.Is(err, client.ErrNoLiveOutput):
				fmt.Fprintf(g.stderr, "paddock: the live output of %s ended early (%v); `paddock output %s` has it all when kept\n", id, err, id)
			case err != nil:
				return err
			case !n.End && !follow:
				fmt.Fprintf(g.stderr, "paddock: job %s has not ended; `paddock logs -f %s` follows it\n", id, id)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the job ends")
	return cmd
}

func outputCmd(g *globals) *cobra.Command {
	var stderr bool
	cmd := &cobra.Command{
		Use:   "output ID [--stderr] > FILE",
		Short: "Write a job's complete kept stdout (or stderr) exactly as it printed it",
		Long: `output writes the complete stdout (--stderr: stderr) a job kept in the
tenant's bucket, byte for byte (nothing added). A job keeps it when submitted
with --keep-output (spec "output": {"keep": true}) or by the operator's
default; the result alone holds only the head and tail.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			stream := "stdout"
			if stderr {
				stream = "stderr"
			}
			c, closeFn, err := g.newClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			rc, err := c.Output(ctx, id, stream)
			if err != nil {
				return notKeptHint(err, id)
			}
			defer rc.Close()
			if _, err := io.Copy(g.stdout, rc); err != nil {
				return fmt.Errorf("output %s: %w", id, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&stderr, "stderr", false, "write the kept stderr instead of stdout")
	return cmd
}

// notKeptHint says what to do about an output that was not kept.
func notKeptHint(err error, id string) error {
	var nk *client.NotKeptError
	switch {
	case !errors.As(err, &nk):
		return err
	case !nk.Finished:
		return fmt.Errorf("job %s has no result yet: its output is kept when it ends (`paddock wait %s`, then try again)", id, id)
	case nk.Expired:
		return fmt.Errorf("the kept %s of job %s has expired from the bucket", nk.What, id)
	case nk.Note != "":
		return fmt.Errorf("the %s of job %s was not kept: %s", nk.What, id, nk.Note)
	}
	return fmt.Errorf("the %s of job %s was not kept: submit with --keep-output to keep a job's complete output "+
		"(`paddock get %s` shows the head and tail in its result)", nk.What, id, id)
}

func putCmd(g *globals) *cobra.Command {
	var ref, output string
	cmd := &cobra.Command{
		Use:   "put FILE [--ref NAME]",
		Short: "Upload a file to the tenant's input bucket, for jobs to name by ref",
		Long: `put uploads FILE ('-': stdin, with --ref) to the tenant's input bucket and
prints its ref and sha256. A job spec names it in "files": [{"path":
"data.csv", "ref": "<ref>"}] and gets it under its workspace before its
command runs. The default ref is in/<sha256>/<file name>; submit --in-file
uploads large files so by itself.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, file := cmd.Context(), args[0]
			if file == "-" && ref == "" {
				return errors.New("put -: give --ref NAME (the default ref names the file's sha256, which stdin cannot be read twice for)")
			}
			c, closeFn, err := g.newClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			var obj job.Object
			if file == "-" {
				obj, err = c.Put(ctx, ref, os.Stdin)
			} else {
				obj, err = c.PutFile(ctx, file, ref)
			}
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSONL(g.stdout, []job.Object{obj})
			}
			_, err = fmt.Fprintf(g.stdout, "%s\t%s\t%d bytes\n", obj.Name, obj.SHA256, obj.Bytes)
			return err
		},
	}
	cmd.Flags().StringVar(&ref, "ref", "", "the object's `NAME` ([A-Za-z0-9._/-], e.g. inputs/data.csv; default in/<sha256>/<file name>)")
	addOutputFlag(cmd, &output)
	return cmd
}

// artifactList is `paddock artifacts -o json`'s line.
type artifactList struct {
	ID        string        `json:"id"`
	Artifacts []job.Object  `json:"artifacts"`
	Refused   []job.Refusal `json:"refused"`
}

func artifactsCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "artifacts ID",
		Short: "List the files a job left (path, size, sha256) and those refused; 'artifacts get ID PATH' fetches one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id := cmd.Context(), args[0]
			c, closeFn, err := g.newClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			objs, refused, err := c.Artifacts(ctx, id)
			if errors.Is(err, client.ErrNotFinished) {
				return fmt.Errorf("job %s has no result yet (still queued or running, or unknown): its artifacts are listed when it ends", id)
			}
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSONL(g.stdout, []artifactList{{ID: id, Artifacts: objs, Refused: refused}})
			}
			printArtifacts(g.stdout, objs, refused)
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	cmd.AddCommand(artifactGetCmd(g))
	return cmd
}

func printArtifacts(w io.Writer, objs []job.Object, refused []job.Refusal) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tBYTES\tSHA256\tNOTE")
	for _, o := range objs {
		note := o.Note
		if o.Truncated && note == "" {
			note = "truncated"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", o.Path, o.Bytes, o.SHA256, note)
	}
	tw.Flush()
	if len(refused) == 0 {
		return
	}
	fmt.Fprintf(w, "\nrefused\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range refused {
		fmt.Fprintf(tw, "  %s\t%s\n", r.Path, r.Reason)
	}
	tw.Flush()
}

func artifactGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get ID PATH > FILE",
		Short: "Write one artifact of a job exactly (its PATH as 'paddock artifacts ID' lists it)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, id, path := cmd.Context(), args[0], args[1]
			c, closeFn, err := g.newClient(ctx)
			if err != nil {
				return err
			}
			defer closeFn()
			rc, err := c.Artifact(ctx, id, path)
			if errors.Is(err, client.ErrNotFinished) {
				return fmt.Errorf("job %s has no result yet: its artifacts are there when it ends", id)
			}
			if err != nil {
				return notKeptHint(err, id)
			}
			defer rc.Close()
			if _, err := io.Copy(g.stdout, rc); err != nil {
				return fmt.Errorf("artifact %s of %s: %w", path, id, err)
			}
			return nil
		},
	}
}
