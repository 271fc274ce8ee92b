package broker_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/paddockhq/paddock/broker"
)

// paddockClaims are the claims a downstream service reads from a Paddock
// broker token.
type paddockClaims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"` // "tenant/job"
	Audience  string `json:"aud"`
	NotBefore int64  `json:"nbf"`
	Expires   int64  `json:"exp"`
	Tenant    string `json:"paddock_tenant"`
	Job       string `json:"paddock_job"`
	Grant     string `json:"paddock_grant"`
}

// verifyPaddockToken is what a downstream service runs on the bearer token
// of a request, with only Go's standard library: jwks is the broker's
// published key set (Broker.JWKS), audience the service's own name as the
// grant's "token.audience" gives it.
func verifyPaddockToken(jwks []byte, token, audience string, now time.Time) (*paddockClaims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWS compact token")
	}
	var hdr struct{ Alg, Kid string }
	if err := decodeSegment(parts[0], &hdr); err != nil || hdr.Alg != "EdDSA" {
		return nil, errors.New("token header: want alg EdDSA")
	}
	var set struct {
		Keys []struct{ Kty, Crv, X, Kid string }
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	var pub ed25519.PublicKey
	for _, k := range set.Keys {
		if k.Kid == hdr.Kid && k.Kty == "OKP" && k.Crv == "Ed25519" {
			pub, _ = base64.RawURLEncoding.DecodeString(k.X)
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if len(pub) != ed25519.PublicKeySize || err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return nil, errors.New("bad signature, or a key the broker did not publish")
	}
	var c paddockClaims
	if err := decodeSegment(parts[1], &c); err != nil {
		return nil, fmt.Errorf("token claims: %w", err)
	}
	switch {
	case c.Audience != audience:
		return nil, fmt.Errorf("token is for %q, not for us", c.Audience)
	case now.Unix() >= c.Expires:
		return nil, errors.New("token expired")
	case now.Unix() < c.NotBefore:
		return nil, errors.New("token not valid yet")
	}
	return &c, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// A grant with a "token" makes the broker inject a short-lived JWT, bound to
// the tenant, the job and the grant, instead of a stored secret. The
// downstream service verifies it with the broker's published key.
func Example_verifyToken() {
	policy, _ := broker.ParsePolicy([]byte(`{
	  "grants": [{"name": "inventory", "url": "https://inventory.example/v1",
	              "headers": {"Authorization": "Bearer ${token}"},
	              "token": {"audience": "inventory", "ttl": "5m"}}],
	  "tenants": {"acme": ["inventory"]}
	}`))
	secrets, _ := broker.NewEnvSecrets(context.Background(), "EXAMPLE_SECRET_")
	b, _ := broker.New(policy, secrets, broker.Config{})
	j := broker.JobInfo{Tenant: "acme", ID: "nightly-42", Grants: []string{"inventory"}, Deadline: time.Now().Add(time.Minute)}
	token, _ := b.MintToken(j, "inventory") // what the upstream receives as "Bearer <token>"

	// In the downstream service, with the JWKS fetched from the operator:
	jwks := b.JWKS()
	c, err := verifyPaddockToken(jwks, token, "inventory", time.Now())
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println(c.Tenant, c.Job, c.Grant, c.Subject)
	fmt.Println("expires with the job:", c.Expires <= j.Deadline.Unix())
	_, err = verifyPaddockToken(jwks, token, "billing", time.Now())
	fmt.Println("another service:", err)
	// Output:
	// acme nightly-42 inventory acme/nightly-42
	// expires with the job: true
	// another service: token is for "inventory", not for us
}
