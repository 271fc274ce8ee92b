package gateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

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
