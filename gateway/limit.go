package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters holds the per-token request rate limit (a token bucket of rate
// and burst) and the per-token count of open event streams.
//
// Memory stays bounded without a background goroutine: an entry may be
// dropped once it holds no stream and its bucket has refilled (it has been
// idle for burst/rate at least), because a fresh entry then behaves
// exactly like it; allow sweeps such entries at most every sweepEvery, so
// the map holds only the tokens seen within about max(burst/rate,
// sweepEvery). Only authenticated tokens get an entry.
type limiters struct {
	rate       rate.Limit
	burst      int
	maxStreams int
	// idle is how long an entry without streams must go unused before it
	// is dropped: long enough for its bucket to be full again.
	idle       time.Duration
	sweepEvery time.Duration

	mu        sync.Mutex
	entries   map[string]*limitEntry
	lastSweep time.Time
}

type limitEntry struct {
	lim      *rate.Limiter
	streams  int
	lastSeen time.Time
}

// sweepEvery bounds how often allow walks the entries to drop idle ones.
const sweepEvery = time.Minute

func newLimiters(r float64, burst, maxStreams int) *limiters {
	refill := time.Duration(math.Ceil(float64(burst) / r * float64(time.Second)))
	if r <= 0 || refill <= 0 || refill > 24*time.Hour {
		refill = 24 * time.Hour
	}
	return &limiters{rate: rate.Limit(r), burst: burst, maxStreams: maxStreams, idle: refill,
		sweepEvery: sweepEvery, entries: map[string]*limitEntry{}}
}

// entry returns key's entry, creating it; l.mu must be held.
func (l *limiters) entry(key string, now time.Time) *limitEntry {
	e := l.entries[key]
	if e == nil {
		e = &limitEntry{lim: rate.NewLimiter(l.rate, l.burst)}
		l.entries[key] = e
	}
	e.lastSeen = now
	return e
}

// allow takes one request of key at now. When the bucket is empty it
// takes nothing and says how long until a request would be allowed.
func (l *limiters) allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	res := l.entry(key, now).lim.ReserveN(now, 1)
	if !res.OK() {
		return false, l.idle
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

// openStream counts one more open stream of key; false when key holds
// maxStreams already. release (idempotent) ends the stream.
func (l *limiters) openStream(key string, now time.Time) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entry(key, now)
	if e.streams >= l.maxStreams {
		return func() {}, false
	}
	e.streams++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			// lastSeen stays: the bucket refills from the last request.
			e.streams--
		})
	}, true
}

// sweep drops the entries that hold no stream and were idle for l.idle,
// at most every l.sweepEvery; l.mu must be held.
func (l *limiters) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < l.sweepEvery {
		return
	}
	l.lastSweep = now
	for key, e := range l.entries {
		if e.streams == 0 && now.Sub(e.lastSeen) >= l.idle {
			delete(l.entries, key)
		}
	}
}

// size is the number of entries held.
func (l *limiters) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}
