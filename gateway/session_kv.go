package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/job"
)

// SessionBucket is the KV bucket of KVSessions.
const SessionBucket = "paddock_sessions"

// storeTimeout bounds a store call whose context has no deadline.
const storeTimeout = 10 * time.Second

// touchTries bounds Touch's retries when other writers race it.
const touchTries = 5

// markerTTL is how long the marker of a removed session stays in the
// bucket (every ended session leaves one; without a TTL they would pile up
// forever, one per MCP session).
const markerTTL = time.Minute

// KVSessions is a SessionStore in the NATS KV bucket SessionBucket (file
// storage, one revision per key), keyed "<tenant>.<volume>", each value
// the JSON of a Session. Safe for concurrent use by any number of
// gateways.
type KVSessions struct {
	kv jetstream.KeyValue
	// markerTTL is the TTL of removal markers (0: the server predates
	// marker TTLs, NATS 2.11; markers then stay).
	markerTTL time.Duration
}

// NewKVSessions binds the bucket, creating it when it does not exist.
func NewKVSessions(ctx context.Context, js jetstream.JetStream) (*KVSessions, error) {
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, SessionBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg := sessionBucketConfig(0)
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			cfg.LimitMarkerTTL = 0
			kv, err = js.CreateKeyValue(ctx, cfg)
		}
		if errors.Is(err, jetstream.ErrBucketExists) { // another gateway created it meanwhile
			kv, err = js.KeyValue(ctx, SessionBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: session bucket %s: %w", SessionBucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway: session bucket %s: %w", SessionBucket, err)
	}
	k := &KVSessions{kv: kv}
	if st.LimitMarkerTTL() > 0 {
		k.markerTTL = markerTTL
	}
	return k, nil
}

func sessionBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: SessionBucket, Description: "Paddock agent sessions (package gateway)",
		History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: markerTTL, Replicas: replicas}
}

// EnsureSessionBucket creates the sessions bucket with replicas (1, 3 or
// 5) when it is missing, and moves an existing one to that count (its
// other settings stay). replicas 0 does nothing: NewKVSessions creates a
// missing bucket at 1.
func EnsureSessionBucket(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas == 0 {
		return nil
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+SessionBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := sessionBucketConfig(replicas)
		_, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			cfg.LimitMarkerTTL = 0
			_, err = js.CreateKeyValue(ctx, cfg)
		}
		if err == nil || !errors.Is(err, jetstream.ErrBucketExists) {
			return wrapBucketErr(err)
		}
		st, err = js.Stream(ctx, "KV_"+SessionBucket) // another gateway made it meanwhile
	}
	if err != nil {
		return wrapBucketErr(err)
	}
	sc := st.CachedInfo().Config
	if sc.Replicas == replicas {
		return nil
	}
	sc.Replicas = replicas
	_, err = js.UpdateStream(ctx, sc)
	return wrapBucketErr(err)
}

func wrapBucketErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("gateway: session bucket %s: %w", SessionBucket, err)
}

func withStoreTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, storeTimeout)
}

// Touch implements SessionStore.
func (k *KVSessions) Touch(ctx context.Context, ref SessionRef, now time.Time) (Session, error) {
	key, vol, err := sessionKey(ref)
	if err != nil {
		return Session{}, err
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	for range touchTries {
		s, err := k.get(ctx, key)
		switch {
		case errors.Is(err, ErrNoSession):
			s = Session{Tenant: ref.Tenant, Name: ref.Name, Kind: ref.Kind, Volume: vol, CreatedAt: now, LastUsed: now, Created: true}
			s.Revision, err = k.kv.Create(ctx, key, mustJSON(s))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // created meanwhile
			}
		case err != nil:
		case !s.EndingAt.IsZero():
			return s, fmt.Errorf("%w: %s (%s) since %s", ErrSessionEnding, ref.Name, ref.Kind, s.EndingAt.Format(time.RFC3339))
		default:
			s.LastUsed = now
			s.Revision, err = k.kv.Update(ctx, key, mustJSON(s), s.Revision)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				continue
			}
		}
		if err != nil {
			return Session{}, fmt.Errorf("gateway: touch session %s: %w", key, err)
		}
		return s, nil
	}
	return Session{}, fmt.Errorf("%w: touch session %s: %d writers raced it; retry", ErrSessionChanged, key, touchTries)
}

// Get implements SessionStore.
func (k *KVSessions) Get(ctx context.Context, ref SessionRef) (Session, error) {
	key, _, err := sessionKey(ref)
	if err != nil {
		return Session{}, err
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	return k.get(ctx, key)
}

func (k *KVSessions) get(ctx context.Context, key string) (Session, error) {
	e, err := k.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Session{}, fmt.Errorf("%w: %s", ErrNoSession, key)
	}
	if err != nil {
		return Session{}, fmt.Errorf("gateway: get session %s: %w", key, err)
	}
	return decodeSession(e)
}

func decodeSession(e jetstream.KeyValueEntry) (Session, error) {
	var s Session
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return Session{}, fmt.Errorf("gateway: session record %s: %w", e.Key(), err)
	}
	s.Revision = e.Revision()
	return s, nil
}

// Claim implements SessionStore.
func (k *KVSessions) Claim(ctx context.Context, s Session, now time.Time) (Session, error) {
	key, _, err := sessionKey(s.Ref())
	if err != nil {
		return Session{}, err
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	s.EndingAt = now
	s.Revision, err = k.kv.Update(ctx, key, mustJSON(s), s.Revision)
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return Session{}, fmt.Errorf("%w: claim %s", ErrSessionChanged, key)
	case err != nil:
		return Session{}, fmt.Errorf("gateway: claim session %s: %w", key, err)
	}
	return s, nil
}

// Remove implements SessionStore.
func (k *KVSessions) Remove(ctx context.Context, s Session) error {
	key, _, err := sessionKey(s.Ref())
	if err != nil {
		return err
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(s.Revision)}
	if k.markerTTL > 0 {
		opts = append(opts, jetstream.PurgeTTL(k.markerTTL))
	}
	err = k.kv.Purge(ctx, key, opts...)
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		if _, gerr := k.get(ctx, key); errors.Is(gerr, ErrNoSession) {
			return nil
		}
		return fmt.Errorf("%w: remove %s", ErrSessionChanged, key)
	case err != nil:
		return fmt.Errorf("gateway: remove session %s: %w", key, err)
	}
	return nil
}

// Idle implements SessionStore: it reads every record (one watch of the
// bucket's current values).
func (k *KVSessions) Idle(ctx context.Context, before time.Time) ([]Session, error) {
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	w, err := k.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("gateway: list sessions: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var idle []Session
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("gateway: list sessions: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("gateway: list sessions: the watcher stopped (NATS connection closed?)")
			}
			if e == nil { // every current record was delivered
				return idle, nil
			}
			if isLoginKey(e.Key()) {
				continue // a dashboard login (login.go)
			}
			s, err := decodeSession(e)
			if err != nil {
				return nil, err
			}
			if s.LastUsed.Before(before) {
				idle = append(idle, s)
			}
		}
	}
}

// Count implements SessionStore: it lists the keys of tenant (one
// watch of the bucket's keys under "<tenant>.").
func (k *KVSessions) Count(ctx context.Context, tenant string, kind SessionKind) (int, error) {
	if err := job.CheckTenant(tenant); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSessionName, err)
	}
	ctx, cancel := withStoreTimeout(ctx)
	defer cancel()
	kl, err := k.kv.ListKeysFiltered(ctx, tenant+".>")
	if err != nil {
		return 0, fmt.Errorf("gateway: count the sessions of %s: %w", tenant, err)
	}
	defer func() { _ = kl.Stop() }()
	seen := map[string]bool{} // a listing may repeat a key
	for key := range kl.Keys() {
		if volumeKind(strings.TrimPrefix(key, tenant+".")) == kind {
			seen[key] = true
		}
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("gateway: count the sessions of %s: %w", tenant, ctx.Err())
	}
	return len(seen), nil
}

// volumeKind is the kind of a session's volume name (SessionVolume).
func volumeKind(vol string) SessionKind {
	switch {
	case strings.HasPrefix(vol, "sess-h-"), strings.HasPrefix(vol, "sess-hx-"):
		return SessionHTTP
	case strings.HasPrefix(vol, "sess-m-"), strings.HasPrefix(vol, "sess-mx-"):
		return SessionMCP
	}
	return ""
}

func mustJSON(s Session) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("gateway: encode a session: %v", err)) // strings and times only
	}
	return b
}
