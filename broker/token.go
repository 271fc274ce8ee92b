package broker

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/paddockhq/paddock/job"
)

// DefaultIssuer is the "iss" of the broker's tokens when Config.Issuer is
// empty.
const DefaultIssuer = "paddock-broker"

// TokenClaims are the claims of a scoped token (a JWT, RFC 7519, signed
// with Ed25519: header {"alg":"EdDSA","typ":"JWT","kid":…}). A downstream
// service checks the signature with the broker's published key (JWKS), then
// that Audience is its own, that the token is not expired, and acts for
// Tenant only. Subject is job.Key(Tenant, Job).
type TokenClaims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"`
	Audience  string `json:"aud"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expires   int64  `json:"exp"`
	ID        string `json:"jti"`
	Tenant    string `json:"paddock_tenant"`
	Job       string `json:"paddock_job"`
	Grant     string `json:"paddock_grant"`
}

// ErrSigningKey is wrapped by LoadSigningKey's errors.
var ErrSigningKey = errors.New("broker: unusable signing key")

// signer mints the scoped tokens.
type signer struct {
	key    ed25519.PrivateKey
	kid    string
	issuer string
	header string // the encoded JWS header
}

func newSigner(key ed25519.PrivateKey, issuer string) *signer {
	s := &signer{key: key, issuer: issuer, kid: keyID(key.Public().(ed25519.PublicKey))}
	h, _ := json.Marshal(map[string]string{"alg": "EdDSA", "typ": "JWT", "kid": s.kid})
	s.header = b64(h)
	return s
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// keyID is the RFC 7638 thumbprint of the public key.
func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + b64(pub) + `"}`))
	return b64(sum[:])
}

// mint signs a token of grant g for job j, valid from now until the
// earlier of now+ttl and the job's deadline.
func (s *signer) mint(now time.Time, j JobInfo, g *grant) (string, error) {
	exp := now.Add(g.token.ttl)
	if !j.Deadline.IsZero() && j.Deadline.Before(exp) {
		exp = j.Deadline
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("broker: token id: %w", err)
	}
	c := TokenClaims{
		Issuer: s.issuer, Subject: job.Key(j.Tenant, j.ID), Audience: g.token.audience,
		IssuedAt: now.Unix(), NotBefore: now.Unix(), Expires: exp.Unix(), ID: b64(id[:]),
		Tenant: j.Tenant, Job: j.ID, Grant: g.name,
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("broker: token: %w", err)
	}
	signing := s.header + "." + b64(payload)
	return signing + "." + b64(ed25519.Sign(s.key, []byte(signing))), nil
}

// jwk is one key of a JWKS (RFC 8037 OKP key).
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func (s *signer) jwks() []byte {
	b, _ := json.Marshal(map[string][]jwk{"keys": {{
		Kty: "OKP", Crv: "Ed25519", X: b64(s.key.Public().(ed25519.PublicKey)),
		Kid: s.kid, Alg: "EdDSA", Use: "sig",
	}}})
	return b
}

// JWKS returns the JSON Web Key Set of key's public half, as a Broker
// signing with key publishes it (Broker.JWKS): for an operator who
// publishes it without running a broker (`paddock broker jwks`).
func JWKS(key ed25519.PrivateKey) []byte { return newSigner(key, DefaultIssuer).jwks() }

// LoadSigningKey reads an Ed25519 private key from a PEM file (PKCS #8, as
// `openssl genpkey -algorithm ed25519 -out broker-key.pem` writes it). The
// file must be readable by its owner only.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, so others may read the key: run `chmod 600 %s`", ErrSigningKey, path, m, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s holds no PEM \"PRIVATE KEY\" block: make one with `openssl genpkey -algorithm ed25519`", ErrSigningKey, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSigningKey, path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds a %T, not an Ed25519 key", ErrSigningKey, path, k)
	}
	return ek, nil
}

// ErrNoToken is wrapped by MintToken's error for a grant without a token.
var ErrNoToken = errors.New("broker: the grant has no scoped token")

// MintToken returns a scoped token of grant for job j, as the broker
// injects it into that grant's calls: for a worker that hands the token on
// itself, and for tests of a downstream service. The tenant of j must have
// the grant (*GrantError otherwise), j must have asked for it, and the grant
// must have a "token".
func (b *Broker) MintToken(j JobInfo, grant string) (string, error) {
	if j.Tenant == "" {
		j.Tenant = job.DefaultTenant
	}
	if err := j.check(); err != nil {
		return "", err
	}
	p := b.Policy()
	if err := p.check(j.Tenant, grant); err != nil {
		return "", err
	}
	g := p.grants[grant]
	switch {
	case !slices.Contains(j.Grants, grant):
		return "", fmt.Errorf("%w: job %s did not ask for grant %q", ErrNoGrant, j.ID, grant)
	case g.token == nil:
		return "", fmt.Errorf("%w: grant %q: add \"token\" to it in the policy", ErrNoToken, grant)
	}
	return b.signer.mint(b.cfg.Now(), j, g)
}
