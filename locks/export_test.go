package locks

// KeysForTest returns the Redis keys of resource's lease and fencing counter.
func (l *Leaser) KeysForTest(resource string) (lease, fence string) { return l.keys(resource) }
