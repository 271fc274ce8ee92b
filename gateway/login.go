package gateway

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Dashboard logins (ui.go). The cookie holds a login id: 32 random bytes,
// nothing else. The server keeps the login's record under a key derived
// from the id (loginKey), never the id itself, so whoever reads the store
// cannot present the cookie. The record holds the tenant, the token's id,
// its expiry and the token itself sealed (AES-256-GCM) under a second key
// derived from the id: the gateway can check the token again on every
// request (a revoked token ends its logins at once) only when the browser
// presents the cookie, and the store alone gives the token to nobody.
// Logging out deletes the record; a record past ExpiresAt is refused (and
// the KV bucket drops it by its TTL).

// ErrNoLogin is wrapped when a login id is unknown, logged out or expired.
var ErrNoLogin = errors.New("gateway: no such login")

// Login is the server-side record of one dashboard login.
type Login struct {
	Tenant    string    `json:"tenant"`
	TokenID   string    `json:"token_id"`
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// LoginStore keeps the dashboard's login records, by loginKey. KVSessions
// and MemSessions are LoginStores.
type LoginStore interface {
	// CreateLogin stores l under key; it expires at l.ExpiresAt.
	CreateLogin(ctx context.Context, key string, l Login) error
	// GetLogin returns the record of key, or an error wrapping ErrNoLogin.
	GetLogin(ctx context.Context, key string) (Login, error)
	// DeleteLogin removes the record of key; a record already gone is no
	// error.
	DeleteLogin(ctx context.Context, key string) error
}

// loginKeyPrefix starts the key of every login record in the sessions
// bucket; a tenant name starts with a letter, so no session key does.
const loginKeyPrefix = "_ui."

// newLoginID is a fresh login id (the cookie's value).
func newLoginID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// wellFormedLoginID reports whether id has the shape newLoginID gives.
func wellFormedLoginID(id string) bool {
	b, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil && len(b) == 32
}

// derive is a key of purpose derived from a login id.
func derive(purpose, id string) [32]byte {
	return sha256.Sum256([]byte("paddock-ui-" + purpose + "\x00" + id))
}

// loginKey is the store key of login id.
func loginKey(id string) string {
	k := derive("key", id)
	return hex.EncodeToString(k[:])
}

// sealToken seals token under login id's sealing key.
func sealToken(id, token string) ([]byte, error) {
	aead, err := loginAEAD(id)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	return aead.Seal(nonce, nonce, []byte(token), []byte(loginKey(id))), nil
}

// openToken is the token sealed in l, with login id's key.
func openToken(id string, l Login) (string, error) {
	aead, err := loginAEAD(id)
	if err != nil {
		return "", err
	}
	if len(l.Sealed) < aead.NonceSize() {
		return "", fmt.Errorf("%w: the record's token is cut", ErrNoLogin)
	}
	n := aead.NonceSize()
	token, err := aead.Open(nil, l.Sealed[:n], l.Sealed[n:], []byte(loginKey(id)))
	if err != nil {
		return "", fmt.Errorf("%w: the record's token does not open with this id", ErrNoLogin)
	}
	return string(token), nil
}

func loginAEAD(id string) (cipher.AEAD, error) {
	k := derive("seal", id)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// CreateLogin implements LoginStore: the record lives in the sessions
// bucket under "_ui.<key>", with a TTL where the server has them (NATS
// 2.11); else it stays until logout, and an expired one is refused and
// removed when presented.
func (k *KVSessions) CreateLogin(ctx context.Context, key string, l Login) error {
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	var opts []jetstream.KVCreateOpt
	if k.markerTTL > 0 {
		opts = append(opts, jetstream.KeyTTL(max(time.Until(l.ExpiresAt), time.Second)))
	}
	if _, err := k.kv.Create(ctx, loginKeyPrefix+key, b, opts...); err != nil {
		return fmt.Errorf("gateway: store a dashboard login: %w", err)
	}
	return nil
}

// GetLogin implements LoginStore.
func (k *KVSessions) GetLogin(ctx context.Context, key string) (Login, error) {
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	e, err := k.kv.Get(ctx, loginKeyPrefix+key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Login{}, fmt.Errorf("%w: unknown or logged out", ErrNoLogin)
	}
	if err != nil {
		return Login{}, fmt.Errorf("gateway: read a dashboard login: %w", err)
	}
	var l Login
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return Login{}, fmt.Errorf("%w: its record does not decode: %w", ErrNoLogin, err)
	}
	return l, nil
}

// DeleteLogin implements LoginStore.
func (k *KVSessions) DeleteLogin(ctx context.Context, key string) error {
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	var opts []jetstream.KVDeleteOpt
	if k.markerTTL > 0 {
		opts = append(opts, jetstream.PurgeTTL(k.markerTTL))
	}
	if err := k.kv.Purge(ctx, loginKeyPrefix+key, opts...); err != nil {
		return fmt.Errorf("gateway: delete a dashboard login: %w", err)
	}
	return nil
}

// CreateLogin implements LoginStore.
func (m *MemSessions) CreateLogin(_ context.Context, key string, l Login) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.logins == nil {
		m.logins = map[string]Login{}
	}
	if _, ok := m.logins[key]; ok {
		return fmt.Errorf("gateway: login %s… exists", key[:8])
	}
	m.logins[key] = l
	return nil
}

// GetLogin implements LoginStore.
func (m *MemSessions) GetLogin(_ context.Context, key string) (Login, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.logins[key]
	if !ok {
		return Login{}, fmt.Errorf("%w: unknown or logged out", ErrNoLogin)
	}
	return l, nil
}

// DeleteLogin implements LoginStore.
func (m *MemSessions) DeleteLogin(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.logins, key)
	return nil
}

// isLoginKey reports whether a sessions-bucket key is a login record's.
func isLoginKey(key string) bool { return strings.HasPrefix(key, loginKeyPrefix) }

// login creates the login of id for token, expiring after sessionMaxAge,
// and returns its id (the cookie's value).
func (g *Gateway) login(ctx context.Context, id Identity, token string) (string, error) {
	lid := newLoginID()
	sealed, err := sealToken(lid, token)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	l := Login{Tenant: id.Tenant, TokenID: id.TokenID, Sealed: sealed, CreatedAt: now, ExpiresAt: now.Add(sessionMaxAge)}
	if err := g.cfg.Logins.CreateLogin(ctx, loginKey(lid), l); err != nil {
		return "", err
	}
	return lid, nil
}

// loginToken is the token of login id: an error wrapping ErrUnauthorized
// when the id is malformed, unknown, logged out or expired.
func (g *Gateway) loginToken(ctx context.Context, lid string) (string, error) {
	if !wellFormedLoginID(lid) {
		return "", fmt.Errorf("%w: %w: not a login id", ErrUnauthorized, ErrNoLogin)
	}
	key := loginKey(lid)
	l, err := g.cfg.Logins.GetLogin(ctx, key)
	if err == nil && !time.Now().Before(l.ExpiresAt) {
		_ = g.cfg.Logins.DeleteLogin(ctx, key)
		err = fmt.Errorf("%w: expired at %s", ErrNoLogin, l.ExpiresAt.Format(time.RFC3339))
	}
	if err == nil {
		var token string
		if token, err = openToken(lid, l); err == nil {
			return token, nil
		}
	}
	if errors.Is(err, ErrNoLogin) {
		return "", fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return "", err
}
