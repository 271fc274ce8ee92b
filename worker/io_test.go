package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/worker"
)

// liveMsg is one message of a job's live output.
type liveMsg struct {
	stream  string
	data    string
	seq     int
	skipped int64
	end     string
}

// follow reads the live output of the default tenant's job id from the
// start until its end marker, on a channel.
func follow(t *testing.T, js jetstream.JetStream, id string) <-chan []liveMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cons, err := js.OrderedConsumer(ctx, job.OutputStream(job.DefaultTenant), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{job.OutputSubject(job.DefaultTenant, id)}})
	require.NoError(t, err)
	out := make(chan []liveMsg, 1)
	go func() {
		defer cancel()
		var got []liveMsg
		for ctx.Err() == nil {
			m, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			h := m.Headers()
			seq, _ := strconv.Atoi(h.Get(job.HeaderOutSeq))
			sk, _ := strconv.ParseInt(h.Get(job.HeaderOutSkipped), 10, 64)
			lm := liveMsg{stream: h.Get(job.HeaderOutStream), data: string(m.Data()), seq: seq, skipped: sk, end: h.Get(job.HeaderOutEnd)}
			got = append(got, lm)
			if lm.end != "" {
				break
			}
		}
		out <- got
	}()
	return out
}

// The output of a running job arrives live, in order and numbered, and
// ends with the job's reason after its result is recorded.
func TestLiveOutput(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	id := testsvc.Unique("live")
	ch := follow(t, s.js, id)
	res := s.run(job.Spec{ID: id, Command: `for i in 1 2 3; do echo line$i; sleep 0.3; done; echo oops >&2; exit 3`})
	require.Equal(t, job.ReasonExitNonzero, res.Reason, res.Error)
	var msgs []liveMsg
	select {
	case msgs = <-ch:
	case <-time.After(time.Minute):
		t.Fatal("no end marker")
	}
	var out, errs strings.Builder
	for i, m := range msgs {
		assert.Equal(t, i+1, m.seq, "chunks are numbered from 1 in order")
		switch m.stream {
		case "stdout":
			out.WriteString(m.data)
		case "stderr":
			errs.WriteString(m.data)
		}
	}
	assert.Equal(t, "line1\nline2\nline3\n", out.String())
	assert.Equal(t, "oops\n", errs.String())
	assert.Equal(t, string(job.ReasonExitNonzero), msgs[len(msgs)-1].end)
	assert.GreaterOrEqual(t, len(msgs), 4, "lines printed 300 ms apart come as separate chunks")
}

// A flood is bounded live: the job runs at full speed, the stream carries
// about the rate, and the skipped bytes are counted.
func TestLiveOutputFloodIsBounded(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	id := testsvc.Unique("flood")
	ch := follow(t, s.js, id)
	const n = 48 << 20
	res := s.run(job.Spec{ID: id, Command: "yes 0123456789abcdef | head -c " + strconv.Itoa(n)})
	require.Equal(t, job.ReasonOK, res.Reason, res.Error)
	msgs := <-ch
	var live, skipped int64
	for _, m := range msgs {
		live += int64(len(m.data))
		skipped += m.skipped
	}
	assert.Equal(t, int64(n), live+skipped, "every byte is either sent or counted as skipped")
	assert.Greater(t, skipped, int64(0))
	assert.Less(t, live, int64(n/2), "the live stream is bounded by the rate, not by the job")
}

// With output.keep the complete output is stored: exact bytes and sha256,
// named on the result, while the result itself stays capped.
func TestKeepOutputExact(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	const n = 40 << 20
	keep := true
	res := s.run(job.Spec{Command: "yes 0123456789abcdef | head -c " + strconv.Itoa(n) + "; echo done >&2",
		Output: &job.OutputPolicy{Keep: &keep}})
	require.Equal(t, job.ReasonOK, res.Reason, res.Error)
	require.NotNil(t, res.Kept)
	want := bytes.Repeat([]byte("0123456789abcdef\n"), n/17+1)[:n]
	sum := sha256.Sum256(want)
	assert.Equal(t, hex.EncodeToString(sum[:]), res.Kept.Stdout.SHA256)
	assert.Equal(t, int64(n), res.Kept.Stdout.Bytes)
	assert.Equal(t, job.StdoutObject(res.ID, res.Runs), res.Kept.Stdout.Name)
	assert.True(t, res.Stdout.Truncated, "the result keeps only head and tail")

	obs, err := s.js.ObjectStore(context.Background(), job.OutBucket(job.DefaultTenant))
	require.NoError(t, err)
	r, err := obs.Get(context.Background(), res.Kept.Stdout.Name)
	require.NoError(t, err)
	h := sha256.New()
	got, err := io.Copy(h, r)
	require.NoError(t, err)
	assert.Equal(t, int64(n), got)
	assert.Equal(t, sum[:], h.Sum(nil))
	e, err := obs.GetBytes(context.Background(), res.Kept.Stderr.Name)
	require.NoError(t, err)
	assert.Equal(t, "done\n", string(e))
}

// Stdin and inline files reach the command; a file by ref comes from the
// tenant's input bucket.
func TestFilesAndStdin(t *testing.T) {
	t.Parallel()
	s := newStack(t, nil)
	ctx := context.Background()
	in, err := s.js.ObjectStore(ctx, job.InBucket(job.DefaultTenant))
	require.NoError(t, err)
	big := bytes.Repeat([]byte("row,1,2,3\n"), 100_000) // 1 MB: over the inline cap
	ref := testsvc.Unique("in") + "/big.csv"
	_, err = in.PutBytes(ctx, ref, big)
	require.NoError(t, err)
	res := s.run(job.Spec{
		Command: `cat data/small.csv; wc -c < big.csv; stat -c '%a %u' run.sh; sh ./run.sh; tr a-z A-Z`,
		Stdin:   "from stdin\n",
		Files: []job.File{
			{Path: "data/small.csv", ContentB64: base64.StdEncoding.EncodeToString([]byte("a,b\n1,2\n"))},
			{Path: "big.csv", Ref: ref},
			{Path: "run.sh", ContentB64: base64.StdEncoding.EncodeToString([]byte("#!/bin/sh\necho script ran\n")), Mode: "0755"},
		},
	})
	require.Equal(t, job.ReasonOK, res.Reason, res.Error+res.Stderr.Text)
	assert.Equal(t, "a,b\n1,2\n1000000\n755 1000\nscript ran\nFROM STDIN\n", res.Stdout.Text)

	missing := s.run(job.Spec{Command: "true", Files: []job.File{{Path: "x", Ref: "no/such"}}})
	assert.Equal(t, job.ReasonRejected, missing.Reason)
	require.NotEmpty(t, missing.Errors)
	assert.Equal(t, "files[0].ref", missing.Errors[0].Field)
}

// Artifacts: matching regular files are stored byte-exact and listed;
// everything hostile is refused with a reason, and nothing outside the
// workspace is read.
func TestArtifacts(t *testing.T) {
	t.Parallel()
	s := newStack(t, func(c *worker.Config) { c.Artifacts.MaxFileBytes = 1 << 20 })
	ctx := context.Background()
	res := s.run(job.Spec{
		Command: `mkdir -p out/deep && printf '{"ok":true}' > out/r.json && head -c 300000 /dev/zero | tr '\0' x > out/deep/big.json &&
ln -s /etc/passwd out/passwd.json && ln -s /proc/1/environ out/env.json && mkfifo out/fifo.json &&
printf x > "$(printf 'out/new\nline.json')" && head -c 2000000 /dev/zero > out/huge.json &&
ln -s /etc out/etc && echo '<h1>report</h1>' > report.html && exit 1`,
		Artifacts: []string{"out/**/*.json", "report.html", "out/etc/*"},
		Limits:    job.Limits{TmpfsMB: ptr(int64(8))},
	})
	require.Equal(t, job.ReasonExitNonzero, res.Reason, res.Error)
	got := map[string]job.Object{}
	for _, a := range res.Artifacts {
		got[a.Path] = a
	}
	require.Contains(t, got, "out/r.json")
	require.Contains(t, got, "out/deep/big.json")
	require.Contains(t, got, "report.html", "artifacts are collected after a failed command too")
	obs, err := s.js.ObjectStore(ctx, job.OutBucket(job.DefaultTenant))
	require.NoError(t, err)
	b, err := obs.GetBytes(ctx, got["out/deep/big.json"].Name)
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte("x"), 300000), b)
	sum := sha256.Sum256(b)
	assert.Equal(t, hex.EncodeToString(sum[:]), got["out/deep/big.json"].SHA256)
	assert.Equal(t, job.ArtifactObject(res.ID, res.Runs, "out/r.json"), got["out/r.json"].Name)

	t.Logf("refused: %+v", res.Refused)
	refused := map[string]string{}
	for _, r := range res.Refused {
		refused[r.Path] = r.Reason
	}
	for _, p := range []string{"out/passwd.json", "out/env.json", "out/fifo.json", `"out/new\nline.json"`} {
		assert.Contains(t, refused, p, "refused: %v", refused)
	}
	assert.Contains(t, refused["out/fifo.json"], "fifo")
	assert.NotContains(t, got, "out/huge.json", "over the per-file cap")
	for p := range got {
		assert.NotContains(t, p, "etc", "nothing is collected through a symlinked directory")
	}
	for _, a := range res.Artifacts {
		assert.NotContains(t, string(a.Name), "passwd")
	}
}

func ptr[T any](v T) *T { return &v }
