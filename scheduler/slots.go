package scheduler

import "sync"

// slots is a counting semaphore whose size can change, served first come,
// first served: the readers of the tenants waiting for a slot get freed
// ones in the order they asked, so tenants take turns (fair share). A limit
// of 0 is no bound.
type slots struct {
	mu      sync.Mutex
	limit   int
	inUse   int
	waiters []chan struct{}
}

func newSlots(limit int) *slots { return &slots{limit: limit} }

// acquire waits for a slot; false when stop closes first (no slot taken).
func (s *slots) acquire(stop <-chan struct{}) bool {
	s.mu.Lock()
	if s.free() && len(s.waiters) == 0 {
		s.inUse++
		s.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-stop:
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				return false
			}
		}
		// Granted while stopping: hand the slot back.
		s.inUse--
		s.dispatch()
		return false
	}
}

// release frees a slot taken by acquire.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inUse--
	s.dispatch()
}

// setLimit changes the number of slots (0: no bound). Slots in use above a
// lower limit are kept until released.
func (s *slots) setLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = max(n, 0)
	s.dispatch()
}

func (s *slots) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

func (s *slots) free() bool { return s.limit == 0 || s.inUse < s.limit }

// dispatch grants free slots to the waiters in order. Called with mu held.
func (s *slots) dispatch() {
	for len(s.waiters) > 0 && s.free() {
		close(s.waiters[0])
		s.waiters = s.waiters[1:]
		s.inUse++
	}
}
