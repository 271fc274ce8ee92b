package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// ioStack is an embedded NATS server with the default tenant's streams
// and stores, no fleet: the test plays the worker.
type ioStack struct {
	t     *testing.T
	ns    *testsvc.NATS
	js    jetstream.JetStream
	flags []string // the global flags that point at it
}

func startIOStack(t *testing.T) *ioStack {
	t.Helper()
	ns := testsvc.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, results.EnsureStreams(context.Background(), js, results.StreamConfig{}))
	return &ioStack{t: t, ns: ns, js: js, flags: []string{"--nats-url", ns.URL, "--data-dir", t.TempDir()}}
}

// cli runs paddock args… against the stack (the global flags first: args
// may end with "-- command").
func (s *ioStack) cli(args ...string) (int, string, string) {
	s.t.Helper()
	return runCLIOut(s.t, append(append([]string(nil), s.flags...), args...)...)
}

// chunk publishes a live output chunk of the default tenant's job id;
// stream "" is the end marker with reason.
func (s *ioStack) chunk(id, stream string, seq int, data string, skipped int64) {
	s.t.Helper()
	m := nats.NewMsg(job.OutputSubject(job.DefaultTenant, id))
	if stream == "" {
		m.Header.Set(job.HeaderOutEnd, data)
	} else {
		m.Header.Set(job.HeaderOutStream, stream)
		m.Header.Set(job.HeaderOutSeq, strconv.Itoa(seq))
		m.Header.Set(job.HeaderOutRun, "1")
		if skipped > 0 {
			m.Header.Set(job.HeaderOutSkipped, strconv.FormatInt(skipped, 10))
		}
		m.Data = []byte(data)
	}
	_, err := s.js.PublishMsg(context.Background(), m)
	require.NoError(s.t, err)
}

func (s *ioStack) finish(r job.Result) {
	s.t.Helper()
	if r.Reason == "" {
		r.Finish(job.ReasonOK)
	}
	data, err := json.Marshal(r)
	require.NoError(s.t, err)
	_, err = s.js.Publish(context.Background(), job.ResultSubject(job.DefaultTenant, r.ID), data)
	require.NoError(s.t, err)
}

// put stores data as object name of bucket and returns its object.
func (s *ioStack) put(bucket, name string, data []byte) job.Object {
	s.t.Helper()
	obs, err := s.js.ObjectStore(context.Background(), bucket)
	require.NoError(s.t, err)
	_, err = obs.PutBytes(context.Background(), name, data)
	require.NoError(s.t, err)
	sum := sha256.Sum256(data)
	return job.Object{Name: name, Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func (s *ioStack) lastSpec() job.Spec {
	s.t.Helper()
	st, err := s.js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
	require.NoError(s.t, err)
	msg, err := st.GetLastMsgForSubject(context.Background(), job.SubmitSubject(job.DefaultTenant))
	require.NoError(s.t, err)
	spec, err := job.Decode(msg.Data)
	require.NoError(s.t, err)
	return spec
}

func writeFile(t *testing.T, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, mode))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

// submit's I/O flags: small files inline with their mode, a large one
// uploaded and given by ref, artifacts, kept output and stdin.
func TestSubmitIOFlags(t *testing.T) {
	s := startIOStack(t)
	small := writeFile(t, "run.sh", []byte("#!/bin/sh\necho hi\n"), 0o750)
	big := bytes.Repeat([]byte("0123456789abcdef"), job.DefaultInlineBytes/16+1)
	bigPath := writeFile(t, "data set.bin", big, 0o600)
	stdin := writeFile(t, "in.txt", []byte("question?\n"), 0o600)
	code, out, errOut := s.cli("submit", "--id", "io-1", "--in-file", small+":bin/run.sh", "--in-file", bigPath,
		"--artifact", "out/**", "--artifact", "*.log", "--keep-output", "--stdin", stdin, "--", "bin/run.sh")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "io-1\n", out)
	sum := sha256.Sum256(big)
	ref := "in/" + hex.EncodeToString(sum[:]) + "/data_set.bin"
	assert.Contains(t, errOut, "as "+ref)

	spec := s.lastSpec()
	require.Len(t, spec.Files, 2)
	assert.Equal(t, job.File{Path: "bin/run.sh", Mode: "0750", ContentB64: base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho hi\n"))}, spec.Files[0])
	assert.Equal(t, job.File{Path: "data set.bin", Mode: "0600", Ref: ref}, spec.Files[1])
	assert.Equal(t, []string{"out/**", "*.log"}, spec.Artifacts)
	require.NotNil(t, spec.Output)
	require.NotNil(t, spec.Output.Keep)
	assert.True(t, *spec.Output.Keep)
	assert.Equal(t, "question?\n", spec.Stdin)
	obs, err := s.js.ObjectStore(context.Background(), job.InBucket(job.DefaultTenant))
	require.NoError(t, err)
	got, err := obs.GetBytes(context.Background(), ref)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(big, got), "the large file was uploaded byte-exact")

	code, _, _ = s.cli("submit", "--id", "io-2", "--no-keep-output", "--", "x")
	require.Equal(t, exitOK, code)
	require.NotNil(t, s.lastSpec().Output.Keep)
	assert.False(t, *s.lastSpec().Output.Keep)

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"both keeps":   {[]string{"--keep-output", "--no-keep-output"}, "not both"},
		"stdin big":    {[]string{"--stdin", writeFile(t, "big.txt", bytes.Repeat([]byte("x"), job.MaxStdinBytes+1), 0o600)}, "more than 65536 bytes"},
		"stdin binary": {[]string{"--stdin", writeFile(t, "bin", []byte{0xff, 0xfe, 0}, 0o600)}, "not UTF-8"},
		"bad path":     {[]string{"--in-file", small + ":../x"}, "must not contain '..'"},
		"twice":        {[]string{"--in-file", small + ":a", "--in-file", small + ":a"}, "given twice"},
		"missing":      {[]string{"--in-file", "/no/such/file"}, "no such file"},
		"bad pattern":  {[]string{"--artifact", "/abs"}, "relative"},
	} {
		code, _, errOut := s.cli(append(append([]string{"submit"}, tc.args...), "--", "x")...)
		assert.Equal(t, exitFailure, code, name)
		assert.Contains(t, errOut, tc.want, name)
	}
	batch := writeFile(t, "jobs.jsonl", []byte(`{"command":"x"}`+"\n"), 0o600)
	code, _, errOut = s.cli("submit", "--file", batch, "--follow")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "a --file spec says")
}

// submit --follow prints the live chunks as they come, then the result on
// stderr, and exits as submit --wait does.
func TestSubmitFollow(t *testing.T) {
	s := startIOStack(t)
	type outcome struct {
		code        int
		out, errOut string
	}
	done := make(chan outcome, 1)
	go func() {
		code, out, errOut := s.cli("submit", "--id", "fol-1", "--follow", "--", "make")
		done <- outcome{code, out, errOut}
	}()
	// The follow reads the stream from its start (direct gets), so the
	// chunks may come any time after the submission.
	require.Eventually(t, func() bool {
		st, err := s.js.Stream(context.Background(), job.JobsStream(job.DefaultTenant))
		return err == nil && st.CachedInfo().State.Msgs == 1
	}, 30*time.Second, 10*time.Millisecond, "the CLI submitted")
	s.chunk("fol-1", "stdout", 1, "building\n", 0)
	s.chunk("fol-1", "stderr", 2, "warning: x", 0)
	s.chunk("fol-1", "stdout", 3, "done\n", 512)
	s.chunk("fol-1", "", 0, string(job.ReasonExitNonzero), 0)
	exit := 2
	s.finish(job.Result{ID: "fol-1", Reason: job.ReasonExitNonzero, State: job.StateFailed, ExitCode: &exit,
		Kept: &job.Kept{Stdout: job.Object{Name: job.StdoutObject("fol-1", 1), Bytes: 14}}})
	o := <-done
	assert.Equal(t, exitJobs, o.code)
	assert.Equal(t, "building\ndone\n", o.out, "stdout is the job's stdout, nothing else")
	assert.Contains(t, o.errOut, "warning: x\n[… 512 bytes skipped on stdout]\n", "a marker on a line of its own")
	assert.Contains(t, o.errOut, "job fol-1: failed (exit_nonzero), exit 2")
	assert.Contains(t, o.errOut, "paddock output fol-1")
}

// logs prints what the stream holds, -f follows to the end, and without
// live output it falls back to the kept output or the result's text.
func TestLogs(t *testing.T) {
	s := startIOStack(t)
	s.chunk("lg-1", "stdout", 1, "one\n", 0)
	s.chunk("lg-1", "stderr", 2, "two\n", 0)
	code, out, errOut := s.cli("logs", "lg-1")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "one\n", out)
	assert.Contains(t, errOut, "two\n")
	assert.Contains(t, errOut, "has not ended; `paddock logs -f lg-1`")

	// The rest is published once the CLI follows: it has subscribed to
	// the job's live subject (one more interest on the server than the
	// output stream's own).
	acc := s.ns.Server.GlobalAccount()
	live := job.OutputSubject(job.DefaultTenant, "lg-1")
	before := acc.Interest(live)
	type ran struct {
		code int
		out  string
	}
	followed, exited := make(chan ran, 1), make(chan struct{})
	go func() {
		defer close(exited)
		code, out, _ := s.cli("logs", "-f", "lg-1")
		followed <- ran{code, out}
	}()
	t.Cleanup(func() { <-exited }) // it logs through t: never after the test
	require.Eventually(t, func() bool { return acc.Interest(live) > before },
		30*time.Second, 5*time.Millisecond, "logs -f subscribes to %s", live)
	s.chunk("lg-1", "stdout", 3, "three\n", 0)
	s.chunk("lg-1", "", 0, "ok", 0)
	r := <-followed
	require.Equal(t, exitOK, r.code)
	assert.Equal(t, "one\nthree\n", r.out)

	kept := s.put(job.OutBucket(job.DefaultTenant), job.StdoutObject("lg-kept", 1), []byte("all of it\n"))
	s.finish(job.Result{ID: "lg-kept", Kept: &job.Kept{Stdout: kept}})
	code, out, errOut = s.cli("logs", "-f", "lg-kept")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "all of it\n", out)
	assert.Contains(t, errOut, "printing its kept output")

	s.finish(job.Result{ID: "lg-text", Stdout: job.Output{Text: "head", Tail: "tail", Truncated: true, OmittedBytes: 10}})
	code, out, errOut = s.cli("logs", "lg-text")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "head\n…[10 bytes omitted]…\ntail", out)
	assert.Contains(t, errOut, "printing the output in its result (cut: 10 bytes of stdout")

	code, _, errOut = s.cli("logs", "lg-none")
	require.Equal(t, exitOK, code)
	assert.Contains(t, errOut, "no live output yet")
}

// output writes the kept bytes exactly; a job that did not keep them gets
// an error that says what to do.
func TestOutputCommand(t *testing.T) {
	s := startIOStack(t)
	data := []byte("no newline at the end \x00\xff")
	s.put(job.OutBucket(job.DefaultTenant), job.StderrObject("out-1", 1), data)
	s.finish(job.Result{ID: "out-1"})
	code, out, _ := s.cli("output", "out-1", "--stderr")
	require.Equal(t, exitOK, code)
	assert.Equal(t, string(data), out)

	code, _, errOut := s.cli("output", "out-1")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "submit with --keep-output")
	code, _, errOut = s.cli("output", "out-2")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "has no result yet")
}

// put prints the ref and sha256; artifacts lists and gets.
func TestPutAndArtifactsCommands(t *testing.T) {
	s := startIOStack(t)
	data := []byte("col1,col2\n1,2\n")
	file := writeFile(t, "data.csv", data, 0o644)
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	code, out, _ := s.cli("put", file)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "in/"+hexSum+"/data.csv\t"+hexSum+"\t14 bytes\n", out)
	code, out, _ = s.cli("put", file, "--ref", "inputs/d.csv", "-o", "json")
	require.Equal(t, exitOK, code)
	var obj job.Object
	require.NoError(t, json.Unmarshal([]byte(out), &obj))
	assert.Equal(t, job.Object{Name: "inputs/d.csv", Bytes: 14, SHA256: hexSum}, obj)
	code, _, errOut := s.cli("put", "-")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "give --ref")

	a := s.put(job.OutBucket(job.DefaultTenant), job.ArtifactObject("art-1", 1, "out/report.txt"), []byte("report"))
	a.Path = "out/report.txt"
	s.put(job.OutBucket(job.DefaultTenant), job.ArtifactObject("art-1", 1, "hidden"), []byte("not listed"))
	s.finish(job.Result{ID: "art-1", Artifacts: []job.Object{a}, Refused: []job.Refusal{{Path: "core", Reason: "over the cap"}}})
	code, out, _ = s.cli("artifacts", "art-1")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "out/report.txt  6      "+a.SHA256)
	assert.Contains(t, out, "refused\n  core  over the cap\n")
	code, out, _ = s.cli("artifacts", "art-1", "-o", "json")
	require.Equal(t, exitOK, code)
	var list artifactList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	assert.Equal(t, artifactList{ID: "art-1", Artifacts: []job.Object{a}, Refused: []job.Refusal{{Path: "core", Reason: "over the cap"}}}, list)

	code, out, _ = s.cli("artifacts", "get", "art-1", "out/report.txt")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "report", out)
	code, _, errOut = s.cli("artifacts", "get", "art-1", "hidden")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "not among the 1 artifacts")
	code, _, errOut = s.cli("artifacts", "art-2")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, errOut, "has no result yet")
}

// The new commands are in the tree, and "artifacts ID" is not taken for
// its "get" subcommand.
func TestIOCommandTree(t *testing.T) {
	root := newRoot(t)
	for args, want := range map[string]string{"logs x": "logs", "output x": "output", "put f": "put",
		"artifacts x": "artifacts", "artifacts get x p": "get"} {
		c, rest, err := root.Find(strings.Fields(args))
		require.NoError(t, err, args)
		assert.Equal(t, want, c.Name(), args)
		assert.NotEmpty(t, rest, args)
	}
	code, out, _ := runCLIOut(t, "--help")
	require.Equal(t, exitOK, code)
	for _, name := range []string{"logs", "output", "put", "artifacts"} {
		assert.Contains(t, out, "\n  "+name+" ", name)
	}
}
