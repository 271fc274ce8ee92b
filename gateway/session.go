package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

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
