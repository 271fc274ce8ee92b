package scheduler

// WaitingForSlot is the number of readers waiting for a fair-share slot,
// each with a message in hand (0 when the Scheduler is not running).
func (s *Scheduler) WaitingForSlot() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return 0
	}
	sl := s.run.holds.slots
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return len(sl.waiters)
}
