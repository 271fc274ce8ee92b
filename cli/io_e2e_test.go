package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
)

// A pipeline on a real, authenticated `paddock up`, through the CLI as its
// dev tenant: a CSV and a larger file in (inline and uploaded), a script,
// a report out as an artifact, the complete output kept and read back
// byte-exact, the spilled log paged.
func TestAgentPipelineCLI(t *testing.T) {
	s := startUp(t)
	dir := t.TempDir()
	csv := filepath.Join(dir, "sales.csv")
	require.NoError(t, os.WriteFile(csv, []byte("region,amount\nnorth,10\nsouth,32\n"), 0o644))
	big := filepath.Join(dir, "history.csv")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("old,1\n"), 100_000), 0o644)) // over the inline cap: uploaded
	script := `mkdir -p out && awk -F, 'NR>1 {s+=$2} END {print "total", s}' in/sales.csv > out/report.txt &&
wc -l < in/history.csv >> out/report.txt && ln -s /etc/passwd out/leak.txt &&
yes 'log line' | head -c 8000000`
	code, out, _ := s.cli(t, "-o", "json", "submit", "--wait", "--keep-output",
		"--in-file", csv+":in/sales.csv", "--in-file", big+":in/history.csv", "--artifact", "out/*.txt", "--", script)
	require.Equal(t, exitOK, code)
	var res job.Result
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &res), out)
	require.Equal(t, job.ReasonOK, res.Reason, res.Error)
	require.True(t, res.Stdout.Truncated, "the result holds head and tail only")

	code, report, _ := s.cli(t, "artifacts", "get", res.ID, "out/report.txt")
	require.Equal(t, exitOK, code)
	assert.Equal(t, "total 42\n100000\n", report)
	code, list, _ := s.cli(t, "artifacts", res.ID)
	require.Equal(t, exitOK, code)
	assert.Contains(t, list, "out/leak.txt", "the symlink is listed as refused")
	assert.Contains(t, list, "symlink")

	code, shown, _ := s.cli(t, "get", res.ID)
	require.Equal(t, exitOK, code)
	assert.Contains(t, shown, "artifact out/report.txt")
	assert.Contains(t, shown, "refused  out/leak.txt: symlink")
	assert.Contains(t, shown, "kept     stdout: 8000000 bytes")

	code, kept, _ := s.cli(t, "output", res.ID)
	require.Equal(t, exitOK, code)
	want := bytes.Repeat([]byte("log line\n"), 8000000/9+1)[:8000000]
	assert.Equal(t, sha256.Sum256(want), sha256.Sum256([]byte(kept)), "kept output is byte-exact")
	assert.Equal(t, int64(len(want)), res.Kept.Stdout.Bytes)

	code, _, errOut := s.cli(t, "output", res.ID, "--stderr")
	assert.Equal(t, exitOK, code, errOut)

	// A path outside the workspace never reaches a container.
	code, out, errOut = s.cli(t, "-o", "json", "submit", "--wait", "--in-file", csv+":../etc/x", "--", "true")
	assert.NotEqual(t, exitOK, code)
	assert.Contains(t, out+errOut, "..")
}

// Live output reaches a follower while the job still runs, and another
// tenant cannot follow it.
func TestLiveOutputWhileRunning(t *testing.T) {
	s := startUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := s.client(t, filepath.Join(s.dir, "auth", "creds", "dev.creds"), "dev")
	sub, err := c.Submit(ctx, job.Spec{Command: "echo first; sleep 6; echo second"})
	require.NoError(t, err)
	var first time.Time
	for ch, err := range c.Follow(ctx, sub.ID) {
		require.NoError(t, err)
		if strings.Contains(string(ch.Data), "first") && first.IsZero() {
			first = time.Now()
			_, gerr := c.Get(ctx, sub.ID)
			assert.True(t, errors.Is(gerr, client.ErrNotFinished), "the first line arrives while the job runs (got %v)", gerr)
		}
		if ch.End {
			assert.Equal(t, job.ReasonOK, ch.Reason)
			break
		}
	}
	require.False(t, first.IsZero(), "no live output")

	// Another tenant's credentials reach neither the stream nor the subject.
	nc := s.conn(t, s.addTenant(t, "snoop"), "snoop")
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	_, err = js.OrderedConsumer(sctx, job.OutputStream("dev"), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{job.OutputSubject("dev", sub.ID)}})
	require.Error(t, err, "snoop must not read dev's output stream")
}

// conn connects to the stack with creds as tenant.
func (s *devStack) conn(t *testing.T, creds, tenant string) *nats.Conn {
	t.Helper()
	nc, err := client.Connect(context.Background(), client.ConnectConfig{URL: s.natsURL, Creds: creds, Tenant: tenant})
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// client is an SDK client of the stack with creds as tenant.
func (s *devStack) client(t *testing.T, creds, tenant string) *client.Client {
	t.Helper()
	c, err := client.New(s.conn(t, creds, tenant), client.Config{Tenant: tenant})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}
