package client

import (
	"crypto/rand"
	"sync"
	"time"
)

// crockford is the ULID alphabet (Crockford's base 32).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var idGen struct {
	sync.Mutex
	ms   uint64
	rand [16]byte // base-32 digits of the random part
}

// NewID returns a new job id: a ULID (26 characters, 48-bit millisecond
// time then 80 random bits from crypto/rand). Ids sort by creation time,
// and ids made by one process in the same millisecond sort in call order
// (the random part is incremented), so a batch's ids sort in batch order.
func NewID() string {
	ms := uint64(time.Now().UnixMilli())
	idGen.Lock()
	// In the same millisecond as the last id (or an earlier one: the clock
	// stepped back) the last random part plus one keeps ids increasing.
	if ms > idGen.ms || !increment(&idGen.rand) {
		var b [16]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
		for i := range b {
			b[i] &= 31
		}
		idGen.ms, idGen.rand = max(ms, idGen.ms), b
	}
	r := idGen.rand
	ms = idGen.ms
	idGen.Unlock()

	var out [26]byte
	for i := 9; i >= 0; i-- {
		out[i] = crockford[ms&31]
		ms >>= 5
	}
	for i, d := range r {
		out[10+i] = crockford[d]
	}
	return string(out[:])
}

// increment adds one to the base-32 number in d; false on overflow.
func increment(d *[16]byte) bool {
	for i := len(d) - 1; i >= 0; i-- {
		if d[i] < 31 {
			d[i]++
			return true
		}
		d[i] = 0
	}
	return false
}
