package broker_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

// TestTokenInjected: the "tok" grant injects a JWT bound to the job, which
// verifies with the broker's JWKS and expires with the job.
func TestTokenInjected(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	j := acmeJob()
	j.Deadline = time.Now().Add(2 * time.Minute) // before the grant's ttl of 10m
	bx := s.serve(j)
	a := bx.do("GET", "http://tok/items", "")
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	token, ok := strings.CutPrefix(s.up.seen()[0].Header.Get("Authorization"), "Bearer ")
	require.True(t, ok)

	c, err := verifyPaddockToken(s.b.JWKS(), token, "inventory", time.Now())
	require.NoError(t, err)
	assert.Equal(t, paddockClaims{Issuer: broker.DefaultIssuer, Subject: "acme/job-1", Audience: "inventory",
		NotBefore: c.NotBefore, Expires: j.Deadline.Unix(), Tenant: "acme", Job: "job-1", Grant: "tok"}, *c)

	_, err = verifyPaddockToken(s.b.JWKS(), token, "inventory", j.Deadline)
	assert.ErrorContains(t, err, "expired", "the token ends with the job")
	other := newSetup(t)
	_, err = verifyPaddockToken(other.b.JWKS(), token, "inventory", time.Now())
	assert.ErrorContains(t, err, "bad signature", "another broker's key does not verify it")

	// A box that changed the claims (say, to another tenant) breaks the signature.
	parts := strings.Split(token, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	forged := strings.Replace(string(payload), `"paddock_tenant":"acme"`, `"paddock_tenant":"beta"`, 1)
	require.NotEqual(t, string(payload), forged)
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(forged))
	_, err = verifyPaddockToken(s.b.JWKS(), strings.Join(parts, "."), "inventory", time.Now())
	assert.ErrorContains(t, err, "bad signature")
}

func TestTokenTTL(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	j := acmeJob() // deadline in an hour, after the ttl of 10m
	tok, err := s.b.MintToken(j, "tok")
	require.NoError(t, err)
	c, err := verifyPaddockToken(s.b.JWKS(), tok, "inventory", time.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(600), c.Expires-c.NotBefore)

	j.Deadline = time.Time{} // no deadline: the ttl alone
	tok2, err := s.b.MintToken(j, "tok")
	require.NoError(t, err)
	assert.NotEqual(t, tok, tok2, "every token has its own id")
}

func TestMintTokenRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, err := s.b.MintToken(broker.JobInfo{Tenant: "beta", ID: "j", Grants: []string{"tok"}}, "tok")
	var ge *broker.GrantError
	assert.ErrorAs(t, err, &ge)
	_, err = s.b.MintToken(broker.JobInfo{Tenant: "acme", ID: "j"}, "tok")
	assert.ErrorIs(t, err, broker.ErrNoGrant)
	_, err = s.b.MintToken(acmeJob(), "svc")
	assert.ErrorIs(t, err, broker.ErrNoToken)
	_, err = s.b.MintToken(broker.JobInfo{Tenant: "acme"}, "tok")
	assert.ErrorIs(t, err, broker.ErrJob)
}

func TestJWKS(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	s := newSetup(t, func(c *broker.Config) { c.SigningKey = key })
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(s.b.JWKS(), &set))
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	assert.Equal(t, "OKP", k["kty"])
	assert.Equal(t, "Ed25519", k["crv"])
	assert.Equal(t, "EdDSA", k["alg"])
	assert.Equal(t, "sig", k["use"])
	assert.Equal(t, base64.RawURLEncoding.EncodeToString(key.Public().(ed25519.PublicKey)), k["x"])
	assert.NotEmpty(t, k["kid"])
}

func TestLoadSigningKey(t *testing.T) {
	t.Parallel()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "broker-key.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))

	got, err := broker.LoadSigningKey(path)
	require.NoError(t, err)
	assert.True(t, key.Equal(got))

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = broker.LoadSigningKey(path)
	assert.ErrorIs(t, err, broker.ErrSigningKey)
	assert.ErrorContains(t, err, "chmod 600")

	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))
	_, err = broker.LoadSigningKey(bad)
	assert.ErrorContains(t, err, `no PEM "PRIVATE KEY" block`)
	_, err = broker.LoadSigningKey(filepath.Join(dir, "none.pem"))
	assert.ErrorIs(t, err, broker.ErrSigningKey)
}
