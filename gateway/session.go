package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddockhq/paddock/internal/startstop"
	"github.com/paddockhq/paddock/job"
)

// Agent sessions. A session is a named workspace: a volume of its tenant
// that every command of the session mounts at /workspace (each command
// still gets a fresh container). A session is created by its first use,
// refreshed by every use, and ended explicitly (HTTP DELETE, an MCP
// session closing, `paddock mcp` exiting) or by the sweeper once idle for
// Config.SessionIdleTTL. Ending one deletes its workspace with a job of its
// tenant (volume.delete), then its record.
//
// Records live in a SessionStore (KVSessions: a NATS KV bucket, shared by
// every gateway). Each change is checked against the revision it was based
// on, so that of two gateways racing to end a session exactly one claims
// it, and a session used meanwhile is not ended.

var (
	// ErrNoSession is wrapped when a session does not exist (never used,
	// or ended).
	ErrNoSession = errors.New("gateway: no such session")
	// ErrSessionName is wrapped when a session has no name, or no valid
	// tenant or kind.
	ErrSessionName = errors.New("gateway: invalid session name")
	// ErrSessionEnding is wrapped when a session is being ended (its
	// workspace is being deleted): use another name, or retry once it is
	// gone.
	ErrSessionEnding = errors.New("gateway: the session is being ended")
	// ErrSessionChanged is wrapped when a revision-checked change lost a
	// race: the session changed since it was read.
	ErrSessionChanged = errors.New("gateway: the session changed meanwhile")
)

// SessionKind says where a session comes from; each kind has its own
// volume names, so that an MCP session and an HTTP session never share a
// workspace whatever their names.
type SessionKind string

const (
	// SessionMCP is an MCP session (streamable HTTP or stdio), named by
	// its session id.
	SessionMCP SessionKind = "mcp"
	// SessionHTTP is a session of the HTTP API, named by the client.
	SessionHTTP SessionKind = "http"
)

// SessionRef names a session.
type SessionRef struct {
	Tenant string
	Kind   SessionKind
	Name   string
}

// Session is the record of one session.
type Session struct {
	Tenant string      `json:"tenant"`
	Name   string      `json:"name"`
	Kind   SessionKind `json:"kind"`
	// Volume is the name of its workspace volume (SessionVolume).
	Volume    string    `json:"volume"`
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used"`
	// EndingAt is when a gateway claimed the session to end it (zero: the
	// session is live). A claim older than the time an end takes is stale
	// and may be taken over.
	EndingAt time.Time `json:"ending_at,omitzero"`
	// Revision is the record's revision in its store.
	Revision uint64 `json:"-"`
	// Created is set by the Touch that created the record.
	Created bool `json:"-"`
}

// Ref is the session's name.
func (s Session) Ref() SessionRef { return SessionRef{Tenant: s.Tenant, Kind: s.Kind, Name: s.Name} }

// SessionStore holds the session records. Every change but Touch is
// checked against the revision of the record it is given.
type SessionStore interface {
	// Touch creates the session of ref (LastUsed and CreatedAt now) or
	// refreshes its LastUsed. A session being ended is not refreshed: the
	// error wraps ErrSessionEnding.
	Touch(ctx context.Context, ref SessionRef, now time.Time) (Session, error)
	// Get returns the session of ref, or an error wrapping ErrNoSession.
	Get(ctx context.Context, ref SessionRef) (Session, error)
	// Claim marks s as being ended at now, unless the record changed since
	// s was read (ErrSessionChanged) or is gone (ErrNoSession).
	Claim(ctx context.Context, s Session, now time.Time) (Session, error)
	// Remove deletes the record s, unless it changed since s was read
	// (ErrSessionChanged). A record already gone is no error.
	Remove(ctx context.Context, s Session) error
	// Idle returns every session last used before before, claimed or not.
	Idle(ctx context.Context, before time.Time) ([]Session, error)
	// Count returns how many sessions of kind tenant has, claimed or not
	// (a session being ended still holds its workspace).
	Count(ctx context.Context, tenant string, kind SessionKind) (int, error)
}

// maxLiteral bounds a session name that its volume name holds as it is
// ("sess-h-" + name within the 64 bytes of a volume name).
const maxLiteral = 57

// literalName reports whether a volume name may hold name as it is: 1 to
// maxLiteral of [A-Za-z0-9._-], starting and ending with a letter or a
// digit, without "..".
func literalName(name string) bool {
	ok := name != "" && len(name) <= maxLiteral && alnum(name[0]) && alnum(name[len(name)-1]) &&
		!strings.Contains(name, "..")
	for i := 0; ok && i < len(name); i++ {
		ok = alnum(name[i]) || strings.IndexByte("._-", name[i]) >= 0
	}
	return ok
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// sessionVolumePrefix starts the volume name of every session; the HTTP
// API refuses a spec that names such a volume itself.
const sessionVolumePrefix = "sess-"

// SessionVolume is the volume name of a session: "sess-h-<name>" for an
// HTTP session, "sess-m-<id>" for an MCP session; a name a volume name
// cannot hold as it is (literalName) becomes "sess-hx-<hash>" or
// "sess-mx-<hash>" (160 bits of its SHA-256). The kind's letter and the x
// keep every form apart, so no two sessions share a workspace.
func SessionVolume(kind SessionKind, name string) (string, error) {
	var prefix string
	switch kind {
	case SessionHTTP:
		prefix = "sess-h"
	case SessionMCP:
		prefix = "sess-m"
	default:
		return "", fmt.Errorf("%w: unknown session kind %q", ErrSessionName, kind)
	}
	switch {
	case name == "":
		return "", fmt.Errorf("%w: a session needs a name", ErrSessionName)
	case literalName(name):
		return prefix + "-" + name, nil
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "x-" + hex.EncodeToString(sum[:20]), nil
}

// sessionKey is the store key of ref: "<tenant>.<volume>" (the volume name
// holds the kind).
func sessionKey(ref SessionRef) (string, string, error) {
	if err := job.CheckTenant(ref.Tenant); err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrSessionName, err)
	}
	vol, err := SessionVolume(ref.Kind, ref.Name)
	if err != nil {
		return "", "", err
	}
	return ref.Tenant + "." + vol, vol, nil
}

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
		cfg := jetstream.KeyValueConfig{Bucket: SessionBucket, Description: "Paddock agent sessions (package gateway)",
			History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: markerTTL}
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

// MemSessions is a SessionStore in memory, for one process: `paddock mcp`
// over stdio, where one process is one session, ended when it exits.
type MemSessions struct {
	mu     sync.Mutex
	rev    uint64
	recs   map[string]Session
	logins map[string]Login // login.go
}

// NewMemSessions returns an empty MemSessions.
func NewMemSessions() *MemSessions { return &MemSessions{recs: map[string]Session{}} }

// Touch implements SessionStore.
func (m *MemSessions) Touch(_ context.Context, ref SessionRef, now time.Time) (Session, error) {
	key, vol, err := sessionKey(ref)
	if err != nil {
		return Session{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.recs[key]
	switch {
	case !ok:
		s = Session{Tenant: ref.Tenant, Name: ref.Name, Kind: ref.Kind, Volume: vol, CreatedAt: now, Created: true}
	case !s.EndingAt.IsZero():
		return s, fmt.Errorf("%w: %s (%s) since %s", ErrSessionEnding, ref.Name, ref.Kind, s.EndingAt.Format(time.RFC3339))
	}
	s.LastUsed = now
	return m.putLocked(key, s), nil
}

func (m *MemSessions) putLocked(key string, s Session) Session {
	m.rev++
	s.Revision = m.rev
	stored := s
	stored.Created = false // the flag is the creating Touch's answer, not the record's
	m.recs[key] = stored
	return s
}

// Get implements SessionStore.
func (m *MemSessions) Get(_ context.Context, ref SessionRef) (Session, error) {
	key, _, err := sessionKey(ref)
	if err != nil {
		return Session{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.recs[key]
	if !ok {
		return Session{}, fmt.Errorf("%w: %s", ErrNoSession, key)
	}
	return s, nil
}

// Claim implements SessionStore.
func (m *MemSessions) Claim(_ context.Context, s Session, now time.Time) (Session, error) {
	key, _, err := sessionKey(s.Ref())
	if err != nil {
		return Session{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.recs[key]
	switch {
	case !ok:
		return Session{}, fmt.Errorf("%w: %s", ErrNoSession, key)
	case cur.Revision != s.Revision:
		return Session{}, fmt.Errorf("%w: claim %s", ErrSessionChanged, key)
	}
	s.EndingAt = now
	return m.putLocked(key, s), nil
}

// Remove implements SessionStore.
func (m *MemSessions) Remove(_ context.Context, s Session) error {
	key, _, err := sessionKey(s.Ref())
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.recs[key]
	switch {
	case !ok:
		return nil
	case cur.Revision != s.Revision:
		return fmt.Errorf("%w: remove %s", ErrSessionChanged, key)
	}
	delete(m.recs, key)
	return nil
}

// Idle implements SessionStore.
func (m *MemSessions) Idle(_ context.Context, before time.Time) ([]Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var idle []Session
	for _, k := range slices.Sorted(maps.Keys(m.recs)) {
		if s := m.recs[k]; s.LastUsed.Before(before) {
			idle = append(idle, s)
		}
	}
	return idle, nil
}

// Count implements SessionStore.
func (m *MemSessions) Count(_ context.Context, tenant string, kind SessionKind) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.recs {
		if s.Tenant == tenant && s.Kind == kind {
			n++
		}
	}
	return n, nil
}

// sessions is the Gateway's session state: the sweeper, the MCP sessions
// it watches, and test knobs. The zero value is ready.
type sessions struct {
	sweeper startstop.Service

	mu       sync.Mutex
	watched  map[string]func()    // MCP session id → close it
	watchers sync.WaitGroup       // the watchers' goroutines
	alive    map[string]time.Time // MCP session id → its last keep-alive touch

	// Test knobs: skew (nanoseconds) is added to the clock of every
	// session time; every replaces sweepInterval(SessionIdleTTL) (set it
	// before Start).
	skew  atomic.Int64
	every time.Duration
}

// now is the clock of session times.
func (g *Gateway) now() time.Time { return time.Now().Add(time.Duration(g.sess.skew.Load())) }

// keepAlive refreshes the record of the MCP session sid of tenant when a
// request of it arrives (a ping or a tools/list keeps the SDK's session,
// so it must keep the workspace too), at most every tenth of the idle
// TTL. Only sessions this gateway watches (they made a call, so their
// record exists) are refreshed; the touch runs off the request's path.
func (g *Gateway) keepAlive(tenant, sid string) {
	now := g.now()
	g.sess.mu.Lock()
	_, watched := g.sess.watched[sid]
	last := g.sess.alive[sid]
	due := watched && now.Sub(last) >= g.cfg.SessionIdleTTL/10
	if due {
		if g.sess.alive == nil {
			g.sess.alive = map[string]time.Time{}
		}
		g.sess.alive[sid] = now
	}
	g.sess.mu.Unlock()
	if !due {
		return
	}
	g.sess.watchers.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := g.touch(ctx, SessionRef{Tenant: tenant, Kind: SessionMCP, Name: sid}); err != nil && !errors.Is(err, ErrSessionEnding) {
			g.log.Warn("mcp: keep the session's workspace alive", "session", sid, "err", err)
		}
	})
}

// touch creates or refreshes the session of ref. A named session it
// creates counts against its tenant's MaxNamedSessions: the record is
// created first, then the tenant's named sessions counted, and the new
// record removed again when they are over the cap (of two gateways racing
// for the last slot, both may refuse; neither lets the tenant past it).
func (g *Gateway) touch(ctx context.Context, ref SessionRef) (Session, error) {
	s, err := g.cfg.Sessions.Touch(ctx, ref, g.now())
	if err != nil || !s.Created || ref.Kind != SessionHTTP {
		return s, err
	}
	n, err := g.cfg.Sessions.Count(ctx, ref.Tenant, SessionHTTP)
	if err == nil && n <= g.cfg.MaxNamedSessions {
		return s, nil
	}
	if rerr := g.cfg.Sessions.Remove(ctx, s); rerr != nil {
		g.log.Warn("remove a session refused by the cap; the idle sweep ends it", "tenant", ref.Tenant, "session", ref.Name, "err", rerr)
	}
	if err != nil {
		return Session{}, err
	}
	return Session{}, &SessionCapError{Tenant: ref.Tenant, Cap: g.cfg.MaxNamedSessions, Idle: g.cfg.SessionIdleTTL}
}

// SessionCapError is a named session refused because its tenant holds
// Cap of them already (Config.MaxNamedSessions).
type SessionCapError struct {
	Tenant string
	Cap    int
	// Idle is when an unused session ends by itself (SessionIdleTTL).
	Idle time.Duration
}

func (e *SessionCapError) Error() string {
	return fmt.Sprintf("tenant %s holds %d named sessions, its cap (MaxNamedSessions, --gateway-max-named-sessions): "+
		"end one with DELETE /v1/sessions/NAME or reuse one; an unused one ends after %s", e.Tenant, e.Cap, e.Idle)
}

// sessionVolume is the workspace of tenant id's HTTP session name, created
// or refreshed: the volume an API job of the session mounts. A session
// being ended is an error wrapping ErrSessionEnding (retry when it is
// gone); an empty name, ErrSessionName.
func (g *Gateway) sessionVolume(ctx context.Context, id Identity, name string) (*job.Volume, error) {
	s, err := g.touch(ctx, SessionRef{Tenant: id.Tenant, Kind: SessionHTTP, Name: name})
	if err != nil {
		return nil, err
	}
	return &job.Volume{Name: s.Volume, Mode: job.VolumeRW, MaxBytes: g.cfg.SessionMaxBytes}, nil
}

// endSession ends tenant id's HTTP session name: its workspace is deleted,
// then its record. An unknown session is an error wrapping ErrNoSession;
// one another gateway is ending, ErrSessionEnding.
func (g *Gateway) endSession(ctx context.Context, id Identity, name string) error {
	return g.end(ctx, SessionRef{Tenant: id.Tenant, Kind: SessionHTTP, Name: name})
}

// end ends the session of ref, retrying when a use races the claim.
func (g *Gateway) end(ctx context.Context, ref SessionRef) error {
	var err error
	for range touchTries {
		var s Session
		if s, err = g.cfg.Sessions.Get(ctx, ref); err != nil {
			return err
		}
		if err = g.finish(ctx, s); !errors.Is(err, ErrSessionChanged) {
			return err
		}
	}
	return err
}

// claimTTL is how long a claim holds: the longest an end takes (the delete
// job's wait) and a margin. An older claim is taken over.
func (g *Gateway) claimTTL() time.Duration { return g.cfg.MaxWait + time.Minute }

// finish claims s, deletes its workspace and removes its record. A failure
// leaves the claim, which goes stale after claimTTL: the sweeper then
// tries again.
func (g *Gateway) finish(ctx context.Context, s Session) error {
	now := g.now()
	if !s.EndingAt.IsZero() && now.Sub(s.EndingAt) < g.claimTTL() {
		return fmt.Errorf("%w: %s (%s) is being ended since %s", ErrSessionEnding, s.Name, s.Kind, s.EndingAt.Format(time.RFC3339))
	}
	s, err := g.cfg.Sessions.Claim(ctx, s, now)
	if err != nil {
		return err
	}
	if err := g.deleteWorkspace(ctx, s); err != nil {
		return err
	}
	if err := g.cfg.Sessions.Remove(ctx, s); err != nil {
		return err
	}
	g.log.Info("session ended", "tenant", s.Tenant, "session", s.Name, "kind", s.Kind, "volume", s.Volume,
		"age", now.Sub(s.CreatedAt).Round(time.Second))
	return nil
}

// WorkspaceError is a session's workspace that could not be deleted: the
// delete job was not submitted, got no result, or did not end ok.
type WorkspaceError struct {
	Tenant, Session, Volume string
	// Job is the delete job's id; Reason and Message its outcome (empty
	// when it has none).
	Job     string
	Reason  job.Reason
	Message string
	Err     error
}

func (e *WorkspaceError) Error() string {
	what := fmt.Sprintf("gateway: delete the workspace %s of session %s (tenant %s) with job %s", e.Volume, e.Session, e.Tenant, e.Job)
	if e.Err != nil {
		return what + ": " + e.Err.Error() + "; it is retried by the session sweeper"
	}
	return fmt.Sprintf("%s: ended %s: %s; it is retried by the session sweeper", what, e.Reason, e.Message)
}

func (e *WorkspaceError) Unwrap() error { return e.Err }

// deleteWorkspace runs the job that deletes s's workspace, as s's tenant,
// and waits for it.
func (g *Gateway) deleteWorkspace(ctx context.Context, s Session) error {
	spec := job.Spec{ID: deleteJobID(s), Command: "true", Heal: &job.HealPolicy{Mode: job.HealOff},
		Volume: &job.Volume{Name: s.Volume, Mode: job.VolumeRW, Delete: true},
		Labels: map[string]string{LabelSession: s.Name, LabelSessionEnd: "true"}}
	werr := &WorkspaceError{Tenant: s.Tenant, Session: s.Name, Volume: s.Volume, Job: spec.ID}
	c, err := g.cfg.Clients.Client(ctx, s.Tenant)
	if err != nil {
		werr.Err = err
		return werr
	}
	if _, err := c.Submit(ctx, spec); err != nil {
		werr.Err = err
		return werr
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.MaxWait)
	defer cancel()
	r, err := c.Wait(wctx, spec.ID)
	if err != nil {
		werr.Err = err
		return werr
	}
	if r.Reason == job.ReasonRejected && hasField(r.Errors, "volume") {
		return nil // a fleet without volumes: there is no workspace to delete
	}
	if r.Reason != job.ReasonOK {
		werr.Reason, werr.Message = r.Reason, r.Error
		return werr
	}
	return nil
}

// deleteJobID names the delete job of one claim of s: a retry within the
// claim submits the same id, which the fleet runs once (so retries do not
// pile delete jobs into the tenant's queue), and a new claim, after a stale
// one, runs a new job.
func deleteJobID(s Session) string {
	h := sha256.Sum256([]byte(s.Tenant + "\x00" + s.Volume + "\x00" + s.CreatedAt.UTC().Format(time.RFC3339Nano) + "\x00" + s.EndingAt.UTC().Format(time.RFC3339Nano)))
	return "sess-end-" + hex.EncodeToString(h[:16])
}

// hasField reports whether errs name field or a field under it.
func hasField(errs []job.FieldError, field string) bool {
	for _, e := range errs {
		if e.Field == field || strings.HasPrefix(e.Field, field+".") {
			return true
		}
	}
	return false
}

// LabelSessionEnd marks the job that deletes a session's workspace.
const LabelSessionEnd = "paddock.session.end"

// sweepInterval is how often the sweeper looks for idle sessions: a tenth
// of the idle TTL, between 1 s and 1 min.
func sweepInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), time.Minute)
}

// sweepers bounds the sessions one sweep ends at once.
const sweepers = 4

// Start runs the session sweeper: every sweepInterval it ends the sessions
// idle for longer than SessionIdleTTL (a failure is logged and retried at
// a later sweep). Idempotent; Stop stops it.
func (g *Gateway) Start(ctx context.Context) error {
	every := g.sess.every
	if every <= 0 {
		every = sweepInterval(g.cfg.SessionIdleTTL)
	}
	return g.sess.sweeper.Start(ctx, startstop.NowAndEvery(every, g.sweep))
}

// Stop stops the sweeper and waits for its pass in progress. Idempotent.
func (g *Gateway) Stop() { g.sess.sweeper.Stop() }

// sweep is one pass of the sweeper.
func (g *Gateway) sweep(ctx context.Context) {
	now := g.now()
	idle, err := g.cfg.Sessions.Idle(ctx, now.Add(-g.cfg.SessionIdleTTL))
	if err != nil {
		if ctx.Err() == nil { // not stopped
			g.log.Warn("session sweep: list idle sessions", "err", err)
		}
		return
	}
	sem := make(chan struct{}, sweepers)
	var wg sync.WaitGroup
	for _, s := range idle {
		if !s.EndingAt.IsZero() && now.Sub(s.EndingAt) < g.claimTTL() {
			continue // being ended elsewhere
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := g.finish(ctx, s)
			switch {
			case err == nil:
			case errors.Is(err, ErrSessionChanged), errors.Is(err, ErrSessionEnding), errors.Is(err, ErrNoSession):
				g.log.Debug("session sweep: not ended", "tenant", s.Tenant, "session", s.Name, "why", err)
			case ctx.Err() != nil:
				g.log.Info("session sweep: stopped while ending a session; a later sweep ends it", "tenant", s.Tenant, "session", s.Name)
			default:
				g.log.Warn("session sweep: end an idle session", "tenant", s.Tenant, "session", s.Name, "err", err)
			}
		})
	}
	wg.Wait()
}
