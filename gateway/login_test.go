package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bucketValues is every value in the sessions bucket.
func bucketValues(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, SessionBucket)
	require.NoError(t, err)
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	var out []string
	for e := range w.Updates() {
		if e == nil {
			break
		}
		out = append(out, e.Key()+" "+string(e.Value()))
	}
	return out
}

// The dashboard's cookie is a login kept server-side (the gateway's
// sessions bucket on a real NATS): the raw token is neither in the cookie
// nor readable from the bucket, and neither is the cookie's id. An
// attacker who copied the cookie loses it when its owner logs out; a
// login past its expiry is refused; revoking the token ends the login.
func TestAttackLoggedOutCookie(t *testing.T) {
	t.Parallel()
	rt := newRealTokens(t)
	g, url := rt.gateway(t, nil)
	owner := newUIClient(t, url, nil)
	cookie := owner.login(rt.dev)
	id := strings.TrimPrefix(cookie, sessionCookie+"=")
	assert.NotContains(t, cookie, rt.dev, "the raw token is not in the cookie")
	vals := bucketValues(t, rt.js)
	require.NotEmpty(t, vals)
	for _, v := range vals {
		assert.NotContains(t, v, rt.dev, "the store holds no raw token")
		assert.NotContains(t, v, id, "the store holds no cookie id")
	}

	thief := newUIClient(t, url, nil)
	resp, body := thief.do(http.MethodGet, "/v1/fleet", "", cookieHeader, cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the copied cookie works while the login lasts: %s", body)
	assert.Contains(t, body, `"tenant":"dev"`)

	resp, _ = owner.do(http.MethodPost, "/ui/logout", "", cookieHeader, cookie, csrfHeader, "1")
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, body = thief.do(http.MethodGet, "/v1/fleet", "", cookieHeader, cookie)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a logged-out cookie is refused: %s", body)
	assert.Contains(t, body, "your dashboard login ended")
	_, body = thief.do(http.MethodGet, "/ui/session", "", cookieHeader, cookie)
	assert.Contains(t, body, "your login ended")
	for _, v := range bucketValues(t, rt.js) {
		assert.False(t, isLoginKey(v), "logout removed the record: %s", v)
	}

	// A login past its expiry is refused (and removed).
	expired := newLoginID()
	sealed, err := sealToken(expired, rt.dev)
	require.NoError(t, err)
	require.NoError(t, g.cfg.Logins.CreateLogin(context.Background(), loginKey(expired),
		Login{Tenant: "dev", TokenID: "x", Sealed: sealed, CreatedAt: time.Now().Add(-13 * time.Hour), ExpiresAt: time.Now().Add(-time.Hour)}))
	resp, _ = thief.do(http.MethodGet, "/v1/fleet", "", cookieHeader, sessionCookie+"="+expired)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an expired login")
	_, err = g.cfg.Logins.GetLogin(context.Background(), loginKey(expired))
	require.ErrorIs(t, err, ErrNoLogin)

	// A sealed token opens only with its own id: a record copied under
	// another id's key is refused.
	other := newLoginID()
	require.NoError(t, g.cfg.Logins.CreateLogin(context.Background(), loginKey(other),
		Login{Tenant: "dev", TokenID: "x", Sealed: sealed, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}))
	resp, _ = thief.do(http.MethodGet, "/v1/fleet", "", cookieHeader, sessionCookie+"="+other)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// The sweeper passes over login records.
	g.sweep(context.Background())
	_, err = g.cfg.Logins.GetLogin(context.Background(), loginKey(other))
	require.NoError(t, err)

	// Revoking the token ends its logins at once.
	fresh := owner.login(rt.dev)
	resp, _ = owner.do(http.MethodGet, "/v1/fleet", "", cookieHeader, fresh)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, rt.toks.Revoke(context.Background(), "dev", rt.devID))
	resp, _ = owner.do(http.MethodGet, "/v1/fleet", "", cookieHeader, fresh)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the login's token was revoked")
}
