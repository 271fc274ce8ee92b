package healer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

func TestRedisMemo(t *testing.T) {
	t.Parallel()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	prefix := testsvc.Unique("memo") + ":"
	m, err := healer.NewRedisMemo(rdb, healer.RedisMemoConfig{KeyPrefix: prefix, TTL: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()

	_, hit, err := m.Get(ctx, "k1")
	require.NoError(t, err)
	assert.False(t, hit)

	fix := healer.Fix{Source: job.ActionLLM, Command: "grep -E x f", CreatedAt: time.Now().UTC().Truncate(time.Second)}
	require.NoError(t, m.Put(ctx, "k1", fix))
	got, hit, err := m.Get(ctx, "k1")
	require.NoError(t, err)
	assert.True(t, hit)
	assert.Equal(t, fix, got)
	ttl, err := rdb.TTL(ctx, prefix+"k1").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "stored with its TTL")

	inst := healer.Fix{Source: job.ActionInstall, Binary: "jq", Packages: []string{"jq", "libjq1"}}
	require.NoError(t, m.Put(ctx, "k2", inst))
	got, hit, err = m.Get(ctx, "k2")
	require.NoError(t, err)
	assert.True(t, hit)
	assert.Equal(t, []string{"jq", "libjq1"}, got.Packages)

	require.NoError(t, m.Delete(ctx, "k1"))
	_, hit, err = m.Get(ctx, "k1")
	require.NoError(t, err)
	assert.False(t, hit)

	// Entries that do not decode, or decode to something unusable, miss.
	for k, v := range map[string]string{
		"junk":     "not json",
		"nothing":  `{"source":"llm"}`,
		"badsrc":   `{"source":"memo","command":"ls"}`,
		"badpkg":   `{"source":"install","binary":"jq","packages":["jq; rm -rf /"]}`,
		"nulbytes": `{"source":"llm","command":"ls\u0000"}`,
	} {
		require.NoError(t, rdb.Set(ctx, prefix+k, v, time.Minute).Err())
		_, hit, err := m.Get(ctx, k)
		require.NoError(t, err)
		assert.False(t, hit, k)
	}

	// Entries expire.
	short, err := healer.NewRedisMemo(rdb, healer.RedisMemoConfig{KeyPrefix: prefix, TTL: time.Second})
	require.NoError(t, err)
	require.NoError(t, short.Put(ctx, "k3", fix))
	require.Eventually(t, func() bool {
		_, hit, err := short.Get(ctx, "k3")
		return err == nil && !hit
	}, 10*time.Second, 50*time.Millisecond)

	_, err = healer.NewRedisMemo(rdb, healer.RedisMemoConfig{TTL: time.Millisecond})
	assert.ErrorIs(t, err, healer.ErrConfig)
	_, err = healer.NewRedisMemo(nil, healer.RedisMemoConfig{})
	assert.ErrorIs(t, err, healer.ErrConfig)
}

// A Redis outage costs the memo, never the job.
func TestMemoOutageIsAMiss(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	srv := testsvc.StartRedis(t)
	rdb := srv.Client()
	t.Cleanup(func() { rdb.Close() })
	m, err := healer.NewRedisMemo(rdb, healer.RedisMemoConfig{})
	require.NoError(t, err)
	srv.Stop()
	ev := newEvents()
	l := newLoop(t, healer.Config{Memo: m, MemoTimeout: 500 * time.Millisecond, Metrics: healer.Metrics{Event: ev.add}})
	res, err := l.Run(context.Background(), s.session(t, small(sandboxImage), nil), spec(sandboxImage, "python -c 'print(1)'"), rules, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, job.ReasonOK, res.Reason)
	assert.Equal(t, []job.Action{job.ActionInitial, job.ActionRules}, actions(res))
	assert.GreaterOrEqual(t, ev.get(healer.EventMemoError), int64(2), "get and put both failed")
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fail := func(stderr string) healer.Failure {
		return healer.Classify(healer.Outcome{ExitCode: 2, Reason: job.ReasonExitNonzero, Stderr: stderr})
	}
	a := healer.Fingerprint("", "img", "make build", fail("make: *** [Makefile:12: all] Error 1\n"))
	b := healer.Fingerprint("", "img", "make build", fail("make: *** [Makefile:40: all] Error 1\n"))
	assert.Equal(t, a, b, "line numbers are masked")
	c := healer.Fingerprint("", "img", "make build\r\n", fail("make: *** [Makefile:40: all] Error 1\n"))
	assert.Equal(t, a, c, "CRLF and trailing blanks are normalized")
	assert.Len(t, a, 64)

	tmp1 := healer.Fingerprint("", "img", "run", fail("error: cannot open /tmp/tmp.a81f3c2d9e/out.txt\n"))
	tmp2 := healer.Fingerprint("", "img", "run", fail("error: cannot open /tmp/tmp.77aa01bc55/out.txt\n"))
	assert.Equal(t, tmp1, tmp2, "paths are masked")

	for name, other := range map[string]string{
		"command": healer.Fingerprint("", "img", "make test", fail("make: *** [Makefile:12: all] Error 1\n")),
		"image":   healer.Fingerprint("", "img2", "make build", fail("make: *** [Makefile:12: all] Error 1\n")),
		"scope":   healer.Fingerprint("tenant-b", "img", "make build", fail("make: *** [Makefile:12: all] Error 1\n")),
		"message": healer.Fingerprint("", "img", "make build", fail("make: *** No rule to make target 'build'.  Stop.\n")),
		"exit":    healer.Fingerprint("", "img", "make build", healer.Failure{Kind: healer.KindFailed, ExitCode: 3, Reason: job.ReasonExitNonzero, Line: "make: *** [Makefile:12: all] Error 1"}),
	} {
		assert.NotEqual(t, a, other, name)
	}
}

func TestNormalizeLine(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "bash: line N: foo: command not found", healer.NormalizeLine("bash: line 12: foo: command not found"))
	assert.Equal(t, "cat: can't open '<path>': No such file or directory", healer.NormalizeLine("cat: can't open '/tmp/x1/y': No such file or directory"))
	assert.Equal(t, "env: '<path>': x", healer.NormalizeLine("env: ‘./a.sh’:   x"))
	assert.Equal(t, "id <hex> failed", healer.NormalizeLine("id deadbeefcafe failed"))
}
