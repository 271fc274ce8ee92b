package redisurl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel problems (a *SentinelError wraps the one every Sentinel shares,
// else ErrNoSentinel).
var (
	// ErrUnknownMaster: the Sentinels answer but monitor no master of the
	// URL's name.
	ErrUnknownMaster = errors.New("redisurl: the Sentinels do not know the master")
	// ErrSentinelAuth: a Sentinel wants a password (or another one).
	ErrSentinelAuth = errors.New("redisurl: a Sentinel refused the credentials")
	// ErrNoSentinel: no Sentinel answered usefully.
	ErrNoSentinel = errors.New("redisurl: no Sentinel gave the master's address")
)

// SentinelAnswer is what one Sentinel said.
type SentinelAnswer struct {
	Addr    string
	Err     error    // nil: it knows the master, at Master
	Master  string   // the master's address, when Err is nil
	Masters []string // with ErrUnknownMaster: the masters it does monitor
}

// SentinelError is the Sentinels' answers when none gave the master.
type SentinelError struct {
	Master  string
	Answers []SentinelAnswer
	kind    error
}

func (e *SentinelError) Error() string {
	parts := make([]string, len(e.Answers))
	for i, a := range e.Answers {
		switch {
		case errors.Is(a.Err, ErrUnknownMaster):
			parts[i] = fmt.Sprintf("%s does not know master %q (it monitors: %s)", a.Addr, e.Master, orNone(a.Masters))
		case errors.Is(a.Err, ErrSentinelAuth):
			parts[i] = fmt.Sprintf("%s refused the credentials (%v): give the Sentinels' own with ?sentinel_password=… (and sentinel_user=…)", a.Addr, errors.Unwrap(a.Err))
		default:
			parts[i] = fmt.Sprintf("%s: %v", a.Addr, a.Err)
		}
	}
	return fmt.Sprintf("no Sentinel gives the address of master %q: %s", e.Master, strings.Join(parts, "; "))
}

// Unwrap returns ErrUnknownMaster or ErrSentinelAuth when every Sentinel
// said so, else ErrNoSentinel.
func (e *SentinelError) Unwrap() error { return e.kind }

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Diagnose asks every Sentinel of a failover URL for its master. It returns
// nil when one gives the master's address (the trouble, if any, is with
// the master itself), else a *SentinelError saying what each answered. A
// single-server URL has nothing to diagnose (nil).
func (u *URL) Diagnose(ctx context.Context) error {
	if u.Failover == nil {
		return nil
	}
	fo := u.Failover
	e := &SentinelError{Master: fo.MasterName}
	same := true
	for _, addr := range fo.SentinelAddrs {
		a := askSentinel(ctx, fo, addr)
		if a.Err == nil {
			return nil
		}
		if len(e.Answers) > 0 && kindOf(a.Err) != kindOf(e.Answers[0].Err) {
			same = false
		}
		e.Answers = append(e.Answers, a)
	}
	e.kind = ErrNoSentinel
	if same && len(e.Answers) > 0 && kindOf(e.Answers[0].Err) != nil {
		e.kind = kindOf(e.Answers[0].Err)
	}
	return e
}

func kindOf(err error) error {
	for _, k := range []error{ErrUnknownMaster, ErrSentinelAuth} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// askSentinel asks the Sentinel at addr for fo's master.
func askSentinel(ctx context.Context, fo *redis.FailoverOptions, addr string) SentinelAnswer {
	dial := fo.DialTimeout
	if dial == 0 {
		dial = 2 * time.Second
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: fo.SentinelUsername, Password: fo.SentinelPassword,
		TLSConfig: fo.TLSConfig, DialTimeout: dial, ReadTimeout: dial, WriteTimeout: dial, MaxRetries: -1})
	defer sc.Close()
	a := SentinelAnswer{Addr: addr}
	hp, err := sc.GetMasterAddrByName(ctx, fo.MasterName).Result()
	switch {
	case err == nil && len(hp) == 2:
		a.Master = hp[0] + ":" + hp[1]
	case errors.Is(err, redis.Nil):
		a.Err = ErrUnknownMaster
		a.Masters = monitored(ctx, sc)
	case err != nil && isAuthError(err):
		a.Err = fmt.Errorf("%w: %w", ErrSentinelAuth, err)
	case err != nil:
		a.Err = err
	default:
		a.Err = fmt.Errorf("unexpected answer %q", hp)
	}
	return a
}

func isAuthError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"NOAUTH", "WRONGPASS", "ERR AUTH", "invalid password", "invalid username-password"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// monitored lists the masters the Sentinel monitors (best effort).
func monitored(ctx context.Context, sc *redis.SentinelClient) []string {
	ms, err := sc.Masters(ctx).Result()
	if err != nil {
		return nil
	}
	var names []string
	for _, m := range ms {
		fields, ok := m.([]any)
		if !ok { // RESP3: a map
			if mm, ok := m.(map[any]any); ok {
				if n, ok := mm["name"].(string); ok {
					names = append(names, n)
				}
			}
			continue
		}
		for i := 0; i+1 < len(fields); i += 2 {
			if k, _ := fields[i].(string); k == "name" {
				if n, ok := fields[i+1].(string); ok {
					names = append(names, n)
				}
			}
		}
	}
	return names
}
