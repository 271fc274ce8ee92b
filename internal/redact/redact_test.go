package redact_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"nats user and password", "nats://u:p4ss@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats token as userinfo", "nats://s3cretTok@h:4222", "nats://xxxxx@h:4222"},
		{"tls user and password", "tls://ops:p4ss@nats.internal:4443", "tls://ops:xxxxx@nats.internal:4443"},
		{"tls token", "tls://s3cretTok@nats.internal:4443", "tls://xxxxx@nats.internal:4443"},
		{"wss token", "wss://s3cretTok@h:443", "wss://xxxxx@h:443"},
		{"nats server list", "nats://u:p4ss@a:4222, nats://tok@b:4222,nats://c:4222",
			"nats://u:xxxxx@a:4222, nats://xxxxx@b:4222,nats://c:4222"},
		{"redis password only", "redis://:p4ss@h/0", "redis://:xxxxx@h/0"},
		{"redis username only stays", "redis://default@h:6379", "redis://default@h:6379"},
		{"rediss user, password and query", "rediss://user:p4ss@h?x=1", "rediss://user:xxxxx@h?x=1"},
		{"escaped password", "redis://u:p%40ss%2Fw@h:6379/1", "redis://u:xxxxx@h:6379/1"},
		{"unix socket", "unix:///var/run/redis.sock", "unix:///var/run/redis.sock"},
		{"unix socket with password", "unix://:p4ss@/var/run/redis.sock?db=2", "unix://:xxxxx@/var/run/redis.sock?db=2"},
		{"no credentials", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"https endpoint", "https://api.example.com/v1", "https://api.example.com/v1"},
		{"query token", "nats://h:4222?token=s3cret&x=1", "nats://h:4222?token=xxxxx&x=1"},
		{"query names in any case", "https://h/v1?API_KEY=s3cret&Password=p4ss&sig=abc&db=1",
			"https://h/v1?API_KEY=xxxxx&Password=xxxxx&sig=xxxxx&db=1"},
		{"query secret and userinfo", "redis://u:p4ss@h/0?client_secret=s3cret", "redis://u:xxxxx@h/0?client_secret=xxxxx"},
		{"empty", "", ""},
		// Malformed input is redacted as text.
		{"bad port", "redis://:p4ss@h:notaport/0", "redis://xxxxx@h:notaport/0"},
		{"slash in password", "redis://u:p4/ss@h:6379", "redis://xxxxx@h:6379"},
		{"hash in digit password", "redis://u:12#34@h", "redis://xxxxx@h"},
		{"question mark in digit password", "nats://u:12?34@h:4222", "nats://xxxxx@h:4222"},
		{"at in password", "redis://u:p@ss@h", "redis://xxxxx@h"},
		{"no scheme", "u:p4ss@h:4222", "xxxxx@h:4222"},
		{"control character", "redis://u:p4ss@h\n:6379", "redis://xxxxx@h?:6379"},
		{"list with a bad piece", "nats://u:12,34@a:4222", "nats://xxxxx@a:4222"},
		{"garbage", "%%%::@@//", "xxxxx@//"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, redact.URL(tc.in))
		})
	}
}

// secret is the password the fuzz target hides in arbitrary text.
const secret = "Zq7Secret"

func FuzzURL(f *testing.F) {
	for _, s := range [][4]string{
		{"nats", "u", "", "h:4222"},
		{"redis", "", "", "h/0"},
		{"rediss", "user", "/x", "h?x=1"},
		{"unix", "", "", "/tmp/r.sock"},
		{"redis", "u", "#", "h"},
		{"", "", "", ""},
		{"nats", "u,nats://v", ",", "h@g"},
		{"x:y", "[::1", "]", "%zz"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, after, rest string) {
		if strings.Contains(scheme+user+after+rest, secret[:3]) {
			t.Skip("the secret must occur once, as the password")
		}
		raw := scheme + "://" + user + ":" + secret + after + "@" + rest
		got := redact.URL(raw) // must not panic
		assert.NotContains(t, got, secret, "input %q", raw)
		assert.Equal(t, got, redact.URL(got), "idempotent")
	})
}
