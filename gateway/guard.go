package gateway

import (
	"crypto/sha256"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The guard against credential guessing and floods of fake credentials.
// Checking a credential costs the token store a lookup or two (a NATS KV
// direct get each), so a client that sends any number of well-formed fake
// tokens would cost the store as many. The guard keeps, per client
// address (clientAddr), a bucket of failed attempts (Config.AuthFailRate
// per second, burst Config.AuthFailBurst). Every failed check (a bearer
// token, a login or a dashboard cookie that is unknown, malformed, revoked
// or expired) takes one from the bucket of its address; while the bucket
// is empty, a credential from that address is refused with 429 before any
// lookup, unless it is one that succeeded recently (a known-good
// credential is still checked in the store, so a revocation is seen at
// once). So a flood costs the store at most burst + rate×seconds lookups
// per address, and a client whose token worked is not locked out by an
// attacker behind the same address.
//
// Memory is bounded: at most maxGuardAddrs addresses hold a bucket (the
// addresses beyond share one, so a flood from many addresses is limited
// as one), and at most maxGoodCreds credentials are remembered as good,
// each for goodTTL after its last success.

const (
	// maxGuardAddrs bounds the addresses that hold a failure bucket.
	maxGuardAddrs = 1 << 16
	// maxGoodCreds bounds the credentials remembered as good.
	maxGoodCreds = 1 << 14
	// goodTTL is how long a credential that succeeded stays known-good.
	goodTTL = time.Hour
	// overflowAddr is the shared key of the addresses past maxGuardAddrs.
	overflowAddr = "overflow"
)

// guard is the per-address limit of failed credential checks.
type guard struct {
	rate  rate.Limit
	burst int
	// idle is how long a bucket must go without a failure before it is
	// full again and may be dropped.
	idle time.Duration

	mu        sync.Mutex
	addrs     map[string]*guardEntry
	good      map[[32]byte]time.Time // sha256 of a credential → its last success
	lastSweep time.Time
}

type guardEntry struct {
	lim      *rate.Limiter
	lastFail time.Time
}

func newGuard(r float64, burst int) *guard {
	idle := time.Duration(math.Ceil(float64(burst) / r * float64(time.Second)))
	if idle <= 0 || idle > 24*time.Hour {
		idle = 24 * time.Hour
	}
	return &guard{rate: rate.Limit(r), burst: burst, idle: idle,
		addrs: map[string]*guardEntry{}, good: map[[32]byte]time.Time{}}
}

func credKey(cred string) [32]byte { return sha256.Sum256([]byte(cred)) }

// admit says whether cred, presented from addr at now, may be checked in
// the store; when not, wait is how long until the next check of addr.
func (g *guard) admit(addr, cred string, now time.Time) (ok bool, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, ok := g.good[credKey(cred)]; ok && now.Sub(last) < goodTTL {
		return true, 0
	}
	e := g.addrs[addr]
	if e == nil {
		if len(g.addrs) < maxGuardAddrs {
			return true, 0 // no failure yet: a full bucket
		}
		if e = g.addrs[overflowAddr]; e == nil {
			return true, 0
		}
	}
	if e.lim.TokensAt(now) >= 1 {
		return true, 0
	}
	res := e.lim.ReserveN(now, 1)
	wait = res.DelayFrom(now)
	res.CancelAt(now)
	return false, max(wait, time.Second)
}

// failed counts a failed check of a credential from addr.
func (g *guard) failed(addr string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now)
	e := g.addrs[addr]
	if e == nil {
		if len(g.addrs) >= maxGuardAddrs {
			addr = overflowAddr
			e = g.addrs[addr]
		}
		if e == nil {
			e = &guardEntry{lim: rate.NewLimiter(g.rate, g.burst)}
			g.addrs[addr] = e
		}
	}
	e.lastFail = now
	e.lim.AllowN(now, 1) // takes one, or nothing when empty
}

// succeeded remembers cred as good.
func (g *guard) succeeded(cred string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now)
	k := credKey(cred)
	if _, ok := g.good[k]; ok || len(g.good) < maxGoodCreds {
		g.good[k] = now
	}
}

// forget drops cred from the good ones (a logout).
func (g *guard) forget(cred string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.good, credKey(cred))
}

// sweep drops full buckets and stale good credentials, at most every
// sweepEvery; g.mu must be held.
func (g *guard) sweep(now time.Time) {
	if now.Sub(g.lastSweep) < sweepEvery {
		return
	}
	g.lastSweep = now
	for a, e := range g.addrs {
		if now.Sub(e.lastFail) >= g.idle {
			delete(g.addrs, a)
		}
	}
	for k, last := range g.good {
		if now.Sub(last) >= goodTTL {
			delete(g.good, k)
		}
	}
}

// clientAddr is the address a request is limited by: the host of its
// RemoteAddr; when that is a trusted proxy (Config.TrustedProxies), the
// rightmost address of X-Forwarded-For that is not a trusted proxy itself
// (the proxies append; what a client wrote on its left is not believed).
// An IPv6 address counts by its /64, the block one host usually holds.
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host // not an IP (a unix socket): one bucket for all
	}
	a = a.Unmap()
	if isTrusted(a, trusted) {
		hops := r.Header.Values("X-Forwarded-For")
		var list []string
		for _, h := range hops {
			list = append(list, strings.Split(h, ",")...)
		}
		for i := len(list) - 1; i >= 0; i-- {
			f, err := netip.ParseAddr(strings.TrimSpace(list[i]))
			if err != nil {
				break // garbage: keep the last good hop
			}
			a = f.Unmap()
			if !isTrusted(a, trusted) {
				break
			}
		}
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedHTTPS reports whether r came over TLS: to the gateway itself,
// or to a trusted proxy that says so in X-Forwarded-Proto.
func forwardedHTTPS(r *http.Request, trusted []netip.Prefix) bool {
	if r.TLS != nil {
		return true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !isTrusted(a.Unmap(), trusted) {
		return false
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}
