package client

import (
	"crypto/rand"
	"sync"

	"github.com/oklog/ulid/v2"
)

// entropy is crypto/rand behind ULID's monotonic reader: within one
// millisecond the random part is incremented, so ids made by one process
// sort in call order. (ulid's default entropy is math/rand seeded by the
// clock: guessable ids.)
var (
	idMu    sync.Mutex
	entropy = ulid.Monotonic(rand.Reader, 0)
	lastMS  uint64 // the time part of the last id: never goes back
)

// NewID returns a new job id: a ULID (26 characters, 48-bit millisecond
// time then 80 random bits from crypto/rand). Ids sort by creation time,
// and ids made by one process in the same millisecond sort in call order,
// so a batch's ids sort in batch order.
// The time part never goes back, even when the wall clock does (a VM's
// clock stepped back by NTP), so that the order holds then too.
func NewID() string {
	idMu.Lock()
	defer idMu.Unlock()
	lastMS = max(lastMS, ulid.Now())
	return ulid.MustNew(lastMS, entropy).String()
}
