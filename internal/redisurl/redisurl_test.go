package redisurl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/redisurl"
)

func TestParseSentinelForms(t *testing.T) {
	for _, tc := range []struct {
		raw                string
		master             string
		addrs              []string
		user, pass         string
		sentUser, sentPass string
		db                 int
		tls                bool
		dialTimeout        time.Duration
	}{
		{raw: "redis+sentinel://user:pass@h1:26379,h2:26380,h3:26381/mymaster", master: "mymaster",
			addrs: []string{"h1:26379", "h2:26380", "h3:26381"}, user: "user", pass: "pass"},
		{raw: "redis+sentinel://127.0.0.1:5000/m/3", master: "m", addrs: []string{"127.0.0.1:5000"}, db: 3},
		{raw: "redis+sentinel://h1,h2:1/m/", master: "m", addrs: []string{"h1:26379", "h2:1"}},
		{raw: "redis+sentinel://[::1]:7000,[::1]/m", master: "m", addrs: []string{"[::1]:7000", "[::1]:26379"}},
		{raw: "redis+sentinel://paddock:p%40ss%2Fw@h:1/m?sentinel_password=s3&sentinel_user=sen", master: "m",
			addrs: []string{"h:1"}, user: "paddock", pass: "p@ss/w", sentUser: "sen", sentPass: "s3"},
		{raw: "rediss+sentinel://h:1/m?dial_timeout=3s", master: "m", addrs: []string{"h:1"}, tls: true, dialTimeout: 3 * time.Second},
		{raw: "redis-sentinel://:pw@h1:1,h2:2?master=mymaster", master: "mymaster", addrs: []string{"h1:1", "h2:2"}, pass: "pw"},
		{raw: "redis-sentinel://h1:1/2?master=mm", master: "mm", addrs: []string{"h1:1"}, db: 2},
		{raw: "REDIS+SENTINEL://h:1/m", master: "m", addrs: []string{"h:1"}},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			u, err := redisurl.Parse("--redis-url", tc.raw)
			require.NoError(t, err)
			require.True(t, u.IsSentinel())
			fo := u.Failover
			assert.Equal(t, tc.master, fo.MasterName)
			assert.Equal(t, tc.addrs, fo.SentinelAddrs)
			assert.Equal(t, tc.user, fo.Username)
			assert.Equal(t, tc.pass, fo.Password)
			assert.Equal(t, tc.sentUser, fo.SentinelUsername)
			assert.Equal(t, tc.sentPass, fo.SentinelPassword)
			assert.Equal(t, tc.db, fo.DB)
			assert.Equal(t, tc.tls, fo.TLSConfig != nil)
			assert.Equal(t, tc.dialTimeout, fo.DialTimeout)
		})
	}
}

func TestParseSingleForms(t *testing.T) {
	for _, tc := range []struct{ raw, network, addr, user, pass string }{
		{"redis://127.0.0.1:6379", "tcp", "127.0.0.1:6379", "", ""},
		{"redis://u:p@h:1/2", "tcp", "h:1", "u", "p"},
		{"rediss://h", "tcp", "h:6379", "", ""},
		{"unix:///tmp/r e d.sock", "unix", "/tmp/r e d.sock", "", ""},
		{"unix://u:p@/tmp/r.sock?db=1", "unix", "/tmp/r.sock", "u", "p"},
	} {
		u, err := redisurl.Parse("--redis-url", tc.raw)
		require.NoError(t, err, tc.raw)
		require.False(t, u.IsSentinel(), tc.raw)
		assert.Equal(t, tc.network, u.Single.Network, tc.raw)
		assert.Equal(t, tc.addr, u.Single.Addr, tc.raw)
		assert.Equal(t, tc.user, u.Single.Username, tc.raw)
		assert.Equal(t, tc.pass, u.Single.Password, tc.raw)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ raw, problem string }{
		{"", "empty"},
		{"127.0.0.1:6379", "no scheme"},
		{"http://h:1", `unknown scheme "http"`},
		{"redis+sentinel://h:1", "no master name"},
		{"redis+sentinel://h:1/", "no master name"},
		{"redis+sentinel:///m", "no Sentinel host"},
		{"redis+sentinel://u:p@/m", "no Sentinel host"},
		{"redis+sentinel://h1:1,,h2:2/m", "an empty host"},
		{"redis+sentinel://h1:port/m", `port "port" is not a number`},
		{"redis+sentinel://h1:0/m", `port "0"`},
		{"redis+sentinel://h1:70000/m", `port "70000"`},
		{"redis+sentinel://h:1/m/x", `database "x"`},
		{"redis+sentinel://h:1/m/-1", `database "-1"`},
		{"redis+sentinel://h:1/m/1/2", "more segments"},
		{"redis+sentinel://h:1/m?master_name=x", `unknown query parameter "master_name"`},
		{"redis+sentinel://h:1/m?master=x", `unknown query parameter "master"`},
		{"redis+sentinel://h:1/m?sentinel_password=a&sentinel_password=b", "given 2 times"},
		{"redis+sentinel://h:1/m?sentinel_user=a", "sentinel_user without sentinel_password"},
		{"redis+sentinel://h:1/m?dial_timeout=soon", "not a positive duration"},
		{"redis+sentinel://h:1/m#frag", "fragment"},
		{"redis+sentinel://u%zz:p@h:1/m", "user name is not validly percent-encoded"},
		{"redis+sentinel://h:1/m%20x", "not a valid name"},
		{"redis-sentinel://h1:1,h2:2", "needs ?master=<name>"},
		{"redis-sentinel://h1:1/m?master=x", `database "m"`},
		{"redis://h:1/notadb", "invalid database"},
		{"redis://u:secret@h:1/notadb", "left out"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			_, err := redisurl.Parse("--redis-url", tc.raw)
			require.Error(t, err)
			assert.ErrorIs(t, err, redisurl.ErrInvalid)
			var ue *redisurl.Error
			require.True(t, errors.As(err, &ue))
			assert.Equal(t, "--redis-url", ue.Flag)
			assert.Contains(t, ue.Problem, tc.problem)
			assert.True(t, strings.HasPrefix(err.Error(), "--redis-url "), err.Error())
		})
	}
}

// No error quotes a password, from the userinfo or from sentinel_password.
func TestParseErrorsRedactPasswords(t *testing.T) {
	for _, raw := range []string{
		"redis+sentinel://u:hunter2@h:1",
		"redis+sentinel://u:hunter2@h:1,h:x/m",
		"redis+sentinel://h:1/m?sentinel_password=hunter2&bogus=1",
		"redis-sentinel://:hunter2@h:1",
		"redis://u:hunter2@h:1/x",
	} {
		_, err := redisurl.Parse("--redis-url", raw)
		require.Error(t, err, raw)
		assert.NotContains(t, err.Error(), "hunter2", raw)
	}
}

func TestSetAuthAndTimeouts(t *testing.T) {
	u, err := redisurl.Parse("--redis-url", "redis+sentinel://h:1/m?dial_timeout=1s")
	require.NoError(t, err)
	u.SetAuth("", "pw", "paddock")
	u.SetTimeouts(5*time.Second, 6*time.Second, 7*time.Second)
	assert.Equal(t, "paddock", u.Failover.Username)
	assert.Equal(t, "pw", u.Failover.Password)
	assert.Equal(t, time.Second, u.Failover.DialTimeout, "the URL's dial_timeout wins")
	assert.Equal(t, 6*time.Second, u.Failover.ReadTimeout)

	s, err := redisurl.Parse("--redis-url", "redis://admin@h:1")
	require.NoError(t, err)
	s.SetAuth("", "pw", "paddock")
	assert.Equal(t, "admin", s.Single.Username, "the URL's user wins over the default")
	assert.NotContains(t, s.String(), "pw")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"redis+sentinel://u:p@h1:1,h2:2/m/0", "redis-sentinel://:p@h?master=m", "redis://h", "unix:///s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := redisurl.Parse("--redis-url", raw)
		if err != nil {
			if !errors.Is(err, redisurl.ErrInvalid) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if (u.Single == nil) == (u.Failover == nil) {
			t.Fatalf("%q: want exactly one of Single and Failover", raw)
		}
		if u.Failover != nil && (u.Failover.MasterName == "" || len(u.Failover.SentinelAddrs) == 0) {
			t.Fatalf("%q: a failover URL without master or Sentinels", raw)
		}
	})
}
