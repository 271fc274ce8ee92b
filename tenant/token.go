package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// TokensBucket is the KV bucket of the bearer tokens: one key per token,
// the hex SHA-256 of its secret; the secret itself is stored nowhere.
const TokensBucket = "paddock_tokens"

// Shape of a token's secret: TokenPrefix and the unpadded, lower-case
// base32 of 32 random bytes (256 bits).
const (
	TokenPrefix = "pdk_"
	tokenBytes  = 32
	// MaxTokenLabel bounds a token's label, in bytes.
	MaxTokenLabel = 100
)

// tokenIDLen is the length of Token.ID: the first 12 hex digits of the
// key (48 bits; an ID names a token in lists and Revoke, it proves
// nothing).
const tokenIDLen = 12

var (
	// ErrBadToken is wrapped by Verify's errors for a secret that is
	// malformed, unknown, revoked, or of a tenant that no longer exists:
	// the caller answers "unauthorized". Any other error of Verify is a
	// failure of the store.
	ErrBadToken = errors.New("tenant: bad bearer token")
	// ErrNoToken is wrapped when a tenant has no token of that ID.
	ErrNoToken = errors.New("tenant: no such token")
)

var tokenEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Token is the stored record of a bearer token (JSON), never its secret.
type Token struct {
	// ID is the token's public name, the first 12 hex digits of the
	// SHA-256 of its secret: lists show it and Revoke takes it.
	ID string `json:"id"`
	// Tenant is the tenant the token acts as.
	Tenant string `json:"tenant"`
	// CreatedAt is when the token was issued.
	CreatedAt time.Time `json:"created_at"`
	// Label says what the token is for ("ci", "laptop"); may be empty.
	Label string `json:"label,omitempty"`
}

// RecordGetter finds a tenant's record; *Registry is one. Get returns an
// error wrapping ErrNotFound for a tenant that does not exist.
type RecordGetter interface {
	Get(ctx context.Context, name string) (Tenant, error)
}

// Tokens is the set of bearer tokens, in the KV bucket TokensBucket. A
// token acts as its tenant while both the token and the tenant's registry
// record exist. It is safe for concurrent use.
//
// Issue, List, Revoke and RevokeTenant need write access to the bucket
// (RoleAdmin); Verify needs only the bucket's info and a direct get by key
// on it and on the registry (RoleGateway).
type Tokens struct {
	kv  jetstream.KeyValue
	reg RecordGetter
}

// NewTokens binds the bucket, creating it when it does not exist, and
// checks tenants in reg (normally the *Registry). A user that may only read
// the bucket (RoleGateway) binds an existing one; where none exists yet,
// its create is refused and NewTokens fails when ctx ends (10 s without a
// deadline): create the bucket as admin first (NewTokens as RoleAdmin, or
// the first Issue).
func NewTokens(ctx context.Context, js jetstream.JetStream, reg RecordGetter) (*Tokens, error) {
	if reg == nil {
		return nil, errors.New("tenant: NewTokens needs the registry (a RecordGetter) to check tenants")
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, TokensBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, tokensConfig(0))
		if errors.Is(err, jetstream.ErrBucketExists) { // another process created it meanwhile
			kv, err = js.KeyValue(ctx, TokensBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tenant: tokens bucket %s: %w", TokensBucket, err)
	}
	return &Tokens{kv: kv, reg: reg}, nil
}

// Issue creates a token of tenantName, which must exist in the registry,
// and returns its secret (shown once: only its hash is kept) and record.
func (ts *Tokens) Issue(ctx context.Context, tenantName, label string) (string, Token, error) {
	if err := checkLabel(label); err != nil {
		return "", Token{}, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if _, err := ts.reg.Get(ctx, tenantName); err != nil {
		return "", Token{}, fmt.Errorf("tenant: issue a token of %q: %w", tenantName, err)
	}
	raw := make([]byte, tokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", Token{}, fmt.Errorf("tenant: token secret: %w", err)
	}
	secret := TokenPrefix + tokenEncoding.EncodeToString(raw)
	key := tokenKey(secret)
	tok := Token{ID: key[:tokenIDLen], Tenant: tenantName, CreatedAt: time.Now().UTC(), Label: label}
	b, err := json.Marshal(tok)
	if err != nil {
		return "", Token{}, fmt.Errorf("tenant: token record: %w", err)
	}
	if _, err := ts.kv.Create(ctx, key, b); err != nil {
		return "", Token{}, fmt.Errorf("tenant: store token %s of %s: %w", tok.ID, tenantName, err)
	}
	return secret, tok, nil
}

// checkLabel accepts up to MaxTokenLabel bytes of printable UTF-8.
func checkLabel(label string) error {
	if len(label) > MaxTokenLabel || strings.ContainsFunc(label, func(r rune) bool {
		return !unicode.IsPrint(r) || r == unicode.ReplacementChar
	}) {
		return &ValidationError{Field: "label", Value: fmt.Sprintf("%q", label),
			Rule: fmt.Sprintf("at most %d bytes of printable text", MaxTokenLabel)}
	}
	return nil
}

// tokenKey is the bucket key of a secret: the hex SHA-256 of its text.
func tokenKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// wellFormed reports whether secret has the shape Issue gives secrets.
// It looks only at the secret's shape (its length and alphabet), never at
// what the store holds, so its timing tells nothing about any token.
func wellFormed(secret string) bool {
	body, ok := strings.CutPrefix(secret, TokenPrefix)
	if !ok || len(body) != tokenEncoding.EncodedLen(tokenBytes) {
		return false
	}
	_, err := tokenEncoding.DecodeString(body)
	return err == nil
}

// Verify returns the token whose secret this is. A malformed, unknown or
// revoked secret, or one whose tenant is no longer in the registry, is an
// error wrapping ErrBadToken; any other error is a failure of the store
// (the caller answers "unavailable", not "unauthorized").
//
// The store is asked for the secret's SHA-256, never for the secret: what
// a lookup's timing could reveal is a prefix of a hash, which does not
// help to find a secret, and no comparison of secrets happens here.
func (ts *Tokens) Verify(ctx context.Context, secret string) (Token, error) {
	if !wellFormed(secret) {
		return Token{}, fmt.Errorf("%w: not a Paddock token (%s followed by %d base32 characters)",
			ErrBadToken, TokenPrefix, tokenEncoding.EncodedLen(tokenBytes))
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	key := tokenKey(secret)
	e, err := ts.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Token{}, fmt.Errorf("%w: unknown or revoked token %s", ErrBadToken, key[:tokenIDLen])
	}
	if err != nil {
		return Token{}, fmt.Errorf("tenant: verify token %s: %w", key[:tokenIDLen], err)
	}
	tok, err := decodeToken(key, e.Value())
	if err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrBadToken, err)
	}
	if _, err := ts.reg.Get(ctx, tok.Tenant); errors.Is(err, ErrNotFound) {
		return Token{}, fmt.Errorf("%w: token %s: its tenant %s was removed", ErrBadToken, tok.ID, tok.Tenant)
	} else if err != nil {
		return Token{}, fmt.Errorf("tenant: verify token %s: %w", tok.ID, err)
	}
	return tok, nil
}

// decodeToken decodes the record stored under key.
func decodeToken(key string, b []byte) (Token, error) {
	var tok Token
	if err := json.Unmarshal(b, &tok); err != nil {
		return Token{}, fmt.Errorf("token record %s…: %w", key[:tokenIDLen], err)
	}
	if tok.ID != key[:tokenIDLen] {
		return Token{}, fmt.Errorf("token record %s… names token %q", key[:tokenIDLen], tok.ID)
	}
	if err := job.CheckTenant(tok.Tenant); err != nil {
		return Token{}, fmt.Errorf("token record %s…: %w", key[:tokenIDLen], err)
	}
	return tok, nil
}

// tokenEntry is a stored token and its bucket key.
type tokenEntry struct {
	key string
	tok Token
}

// entries returns the stored tokens of tenantName, oldest first.
func (ts *Tokens) entries(ctx context.Context, tenantName string) ([]tokenEntry, error) {
	if err := job.CheckTenant(tenantName); err != nil {
		return nil, fmt.Errorf("tenant: tokens: %w", err)
	}
	all, err := listAll(ctx, ts.kv, "tenant: list tokens", func(e jetstream.KeyValueEntry) (tokenEntry, bool, error) {
		tok, err := decodeToken(e.Key(), e.Value())
		if err != nil {
			return tokenEntry{}, false, fmt.Errorf("tenant: list tokens: %w", err)
		}
		return tokenEntry{key: e.Key(), tok: tok}, tok.Tenant == tenantName, nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b tokenEntry) int { return a.tok.CreatedAt.Compare(b.tok.CreatedAt) })
	return all, nil
}

// List returns the tokens of tenantName, oldest first.
func (ts *Tokens) List(ctx context.Context, tenantName string) ([]Token, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	es, err := ts.entries(ctx, tenantName)
	if err != nil {
		return nil, err
	}
	toks := make([]Token, len(es))
	for i, e := range es {
		toks[i] = e.tok
	}
	return toks, nil
}

// Revoke deletes the token of tenantName whose ID is id (every such token,
// should two share an ID), or returns an error wrapping ErrNoToken. Verify
// refuses it from then on; a request it already let in runs to its end.
func (ts *Tokens) Revoke(ctx context.Context, tenantName, id string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	es, err := ts.entries(ctx, tenantName)
	if err != nil {
		return err
	}
	n := 0
	for _, e := range es {
		if e.tok.ID == id {
			if err := ts.kv.Delete(ctx, e.key); err != nil {
				return fmt.Errorf("tenant: revoke token %s of %s: %w", id, tenantName, err)
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: %s has no token %q (see the IDs its token list shows)", ErrNoToken, tenantName, id)
	}
	return nil
}

// RevokeTenant deletes every token of tenantName (for `tenant rm`) and
// returns how many there were.
func (ts *Tokens) RevokeTenant(ctx context.Context, tenantName string) (int, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	es, err := ts.entries(ctx, tenantName)
	if err != nil {
		return 0, err
	}
	for i, e := range es {
		if err := ts.kv.Delete(ctx, e.key); err != nil {
			return i, fmt.Errorf("tenant: revoke the tokens of %s (%d of %d done): %w", tenantName, i, len(es), err)
		}
	}
	return len(es), nil
}
