// Package locks gives a job exclusive use of a shared volume: a Redis lease
// carrying a fencing token, a flock(2) on a lock file, and a fence file that
// rejects writes from a holder that has been superseded.
//
// # Pieces
//
//   - AcquireFile: an exclusive (or shared) flock, polled with LOCK_NB until
//     a timeout or the context ends. The kernel drops it when the holder dies.
//     Lock files are opened O_RDWR|O_CREATE|O_NOFOLLOW and never truncated.
//   - Leaser.Obtain: a lease on a resource in Redis (SET NX PX with a random
//     128-bit owner token), taken in one Lua script together with an INCR of
//     the resource's fencing counter, so every holder gets a token greater than
//     all before it. A watchdog goroutine refreshes the lease every ttl/3 with
//     a token-checked script; Lease.Lost fires when the lease is gone, and
//     always before Redis can have expired it. Release is a token-checked
//     delete.
//   - FencedWrite / CheckAndRecord: a fence file holding the highest token a
//     piece of storage has accepted; a lower token is rejected with a
//     *StaleTokenError, and FencedWrite runs the write itself under the fence
//     file's flock, so check and write are one step.
//   - Guard: the three combined for a named volume directory under a root.
//     Acquire(RW) takes the lease (resource "volume:"+name), then the flock on
//     <Root>/.locks/<name>.lock, then records the token in
//     <Root>/.locks/<name>.fence; Acquire(RO) takes no lock. Held.Release lets
//     go in reverse order on a detached context.
//
// # Use in the worker
//
//	h, err := guard.Acquire(ctx, spec.Volume, locks.RW)
//	if err != nil { ... }                 // locks.Retryable(err) says whether to retry the job
//	defer h.Release()
//	// mount h.Dir() at /workspace, pass h.FencingToken() as PADDOCK_FENCING_TOKEN
//	select {
//	case <-h.Lost():                      // kill the container: state lease_lost
//	case <-done:
//	}
//
// The worker's go-redis client should set ContextTimeoutEnabled, so that a
// refresh against a hung server is abandoned at its deadline.
//
// # Guarantees and limits
//
// Mutual exclusion rests on the lease: Redis must keep its keys (AOF on,
// noeviction) and clocks must run at about the same rate (Lost fires at the
// ttl less 1% + 2 ms after the last refresh was sent). A holder that pauses
// past its ttl (GC, SIGSTOP, a frozen VM) can still act when it resumes,
// before it notices Lost: writes that must never come from a superseded
// holder go through FencedWrite. See docs/locks.md for the protocol and the
// failure modes.
package locks
