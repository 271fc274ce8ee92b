package client

import (
	"crypto/rand"

	"github.com/oklog/ulid/v2"
)

// entropy is crypto/rand behind ULID's monotonic reader: within one
// millisecond the random part is incremented, so ids made by one process
// sort in call order. (ulid's default entropy is math/rand seeded by the
// clock: guessable ids.)
var entropy = &ulid.LockedMonotonicReader{MonotonicReader: ulid.Monotonic(rand.Reader, 0)}

// NewID returns a new job id: a ULID (26 characters, 48-bit millisecond
// time then 80 random bits from crypto/rand). Ids sort by creation time,
// and ids made by one process in the same millisecond sort in call order,
// so a batch's ids sort in batch order.
func NewID() string {
	return ulid.MustNew(ulid.Now(), entropy).String()
}
