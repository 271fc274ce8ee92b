package healer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/paddockhq/paddock/job"
)

// Fix is a repair that worked, as the heal memo keeps it.
type Fix struct {
	// Source is how the fix was first found: install, rules or llm. A job
	// whose policy does not allow that source never gets it from the memo.
	Source job.Action `json:"source"`
	// Command replaces the failing command; "" means the same command
	// again, after installing Packages.
	Command string `json:"command,omitempty"`
	// Binary and Packages are the install performed before the retry.
	Binary   string   `json:"binary,omitempty"`
	Packages []string `json:"packages,omitempty"`
	// CreatedAt is when the fix first worked.
	CreatedAt time.Time `json:"created_at"`
}

func (f Fix) valid() bool {
	switch f.Source {
	case job.ActionInstall, job.ActionRules, job.ActionLLM:
	default:
		return false
	}
	for _, p := range f.Packages {
		if !packageName.MatchString(p) {
			return false
		}
	}
	if len(f.Packages) > 0 && !binaryName.MatchString(f.Binary) {
		return false
	}
	return (f.Command != "" || len(f.Packages) > 0) && len(f.Command) <= MaxCommandBytes &&
		strings.IndexByte(f.Command, 0) < 0
}

// MemoStore keeps fixes by failure fingerprint (see Fingerprint). Get
// reports a miss as (Fix{}, false, nil). The loop bounds every call with
// Config.MemoTimeout and treats errors as misses: a memo outage costs LLM
// calls, never a job.
type MemoStore interface {
	Get(ctx context.Context, key string) (Fix, bool, error)
	Put(ctx context.Context, key string, fix Fix) error
	Delete(ctx context.Context, key string) error
}

// RedisMemoConfig configures a RedisMemo; zero fields take defaults.
type RedisMemoConfig struct {
	// KeyPrefix of the memo's keys (default "paddock:heal:memo:").
	KeyPrefix string
	// TTL of an entry from when it was stored (default 7 days). A hit
	// does not extend it, so a bad entry cannot live forever.
	TTL time.Duration
}

// RedisMemo is a MemoStore in Redis: one string key per fingerprint,
// holding the Fix as JSON, with a TTL.
type RedisMemo struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedisMemo returns a memo over rdb.
func NewRedisMemo(rdb redis.UniversalClient, cfg RedisMemoConfig) (*RedisMemo, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: memo needs a redis client", ErrConfig)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "paddock:heal:memo:"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 7 * 24 * time.Hour
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("%w: memo TTL %s must be at least 1s", ErrConfig, cfg.TTL)
	}
	return &RedisMemo{rdb: rdb, prefix: cfg.KeyPrefix, ttl: cfg.TTL}, nil
}

// Get returns the fix stored for key. An entry that does not decode, or
// decodes to nothing usable, is a miss.
func (m *RedisMemo) Get(ctx context.Context, key string) (Fix, bool, error) {
	raw, err := m.rdb.Get(ctx, m.prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return Fix{}, false, nil
	}
	if err != nil {
		return Fix{}, false, fmt.Errorf("healer: memo get: %w", err)
	}
	var f Fix
	if json.Unmarshal(raw, &f) != nil || !f.valid() {
		return Fix{}, false, nil
	}
	return f, true, nil
}

// Put stores fix under key for the TTL, replacing any previous entry.
func (m *RedisMemo) Put(ctx context.Context, key string, fix Fix) error {
	raw, err := json.Marshal(fix)
	if err != nil {
		return err
	}
	if err := m.rdb.Set(ctx, m.prefix+key, raw, m.ttl).Err(); err != nil {
		return fmt.Errorf("healer: memo put: %w", err)
	}
	return nil
}

// Delete forgets key (a remembered fix that no longer works).
func (m *RedisMemo) Delete(ctx context.Context, key string) error {
	if err := m.rdb.Del(ctx, m.prefix+key).Err(); err != nil {
		return fmt.Errorf("healer: memo delete: %w", err)
	}
	return nil
}

// Fingerprint is the memo key of a failure: the SHA-256 of the scope (see
// Config.MemoScope), the image, the normalized command and the failure's
// signature (kind, exit code, reason, missing binary, and the first error
// line of stderr with numbers, hex ids and paths masked). Two jobs share a
// fingerprint when the same command failed the same way on the same image,
// whatever the line numbers, temp paths or pids in the message.
func Fingerprint(scope, image, command string, f Failure) string {
	h := sha256.New()
	for _, part := range []string{
		"paddock-heal-v1", scope, image, normalizeCommand(command),
		string(f.Kind), strconv.Itoa(f.ExitCode), string(f.Reason), f.Binary, normalizeLine(f.Line),
	} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// normalizeCommand drops what never changes a command's meaning: CR of
// CRLF line ends, trailing blanks of each line, surrounding blank space.
func normalizeCommand(cmd string) string {
	lines := strings.Split(strings.ReplaceAll(cmd, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

var (
	reMaskHex    = regexp.MustCompile(`\b[0-9a-fA-F]{8,}\b`)
	reMaskPath   = regexp.MustCompile(`(?:~|\.{1,2})?/[^\s:'"‘’,;()\[\]]*`)
	reMaskNumber = regexp.MustCompile(`\d+`)
	reMaskSpace  = regexp.MustCompile(`\s+`)
)

// normalizeLine masks the parts of an error line that vary between runs
// of the same failure.
func normalizeLine(l string) string {
	l = strings.NewReplacer("‘", "'", "’", "'", "`", "'", `"`, "'").Replace(l)
	l = reMaskHex.ReplaceAllString(l, "<hex>")
	l = reMaskPath.ReplaceAllString(l, "<path>")
	l = reMaskNumber.ReplaceAllString(l, "N")
	l = reMaskSpace.ReplaceAllString(strings.TrimSpace(l), " ")
	return job.Truncate(l, 256)
}

// memoRepairer is the first link of the repair chain: it replays a fix
// that worked for the same failure before (see Fingerprint), and the loop
// tells it how each retry went (put, forget). A nil store is a memo that
// never hits.
type memoRepairer struct {
	store   MemoStore
	timeout time.Duration // each store call (Config.MemoTimeout)
	inst    *installer    // replays a remembered install
	metrics Metrics
	warn    *warnLimiter
}

// repair turns the next step into a replay of a remembered fix. It passes
// when the memo has no usable fix, or when the fix's install failed (the
// entry is then forgotten).
func (m *memoRepairer) repair(ctx context.Context, r *run, c *repairCase) (bool, error) {
	fix, ok := m.get(ctx, r, c.key)
	if !ok {
		return false, nil
	}
	c.action = job.ActionMemo
	st := c.next
	done := ""
	if len(fix.Packages) > 0 {
		script, desc, ok, err := m.inst.run(ctx, r, fix.Binary, fix.Packages)
		if err != nil {
			return false, err
		}
		st.install = script
		if !ok {
			m.forget(ctx, c.key)
			c.noFix("remembered " + desc)
			return false, nil
		}
		done = ", " + desc
	}
	st.action, st.memoKey = job.ActionMemo, c.key
	st.note = fmt.Sprintf("%s → remembered fix (found by %s) from the heal memo%s", c.what, fix.Source, done)
	if fix.Command != "" {
		st.command = fix.Command
	}
	st.span.SetAttributes(attribute.String(job.AttrHealAction, string(st.action)))
	return true, nil
}

// get looks key up; the fix is usable when r's policy could have found it
// and its command was not tried yet.
func (m *memoRepairer) get(ctx context.Context, r *run, key string) (Fix, bool) {
	if m.store == nil {
		return Fix{}, false
	}
	mctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	fix, hit, err := m.store.Get(mctx, key)
	if err != nil {
		m.metrics.emit(ctx, EventMemoError, 1)
		m.warn.warn("memo", "heal memo lookup failed; healing without it", "err", err)
		return Fix{}, false
	}
	usable := hit && fix.valid() && (fix.Command == "" || !r.wasTried(fix.Command)) &&
		(len(fix.Packages) == 0 || r.allowInstall) &&
		(fix.Source != job.ActionLLM || r.mode == job.HealLLM)
	if usable {
		m.metrics.emit(ctx, EventMemoHit, 1)
	} else {
		m.metrics.emit(ctx, EventMemoMiss, 1)
	}
	return fix, usable
}

// put remembers fix, which made the retry succeed, under key.
func (m *memoRepairer) put(ctx context.Context, key string, fix Fix) {
	if m.store == nil || key == "" {
		return
	}
	fix.CreatedAt = time.Now().UTC()
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
	defer cancel()
	if err := m.store.Put(mctx, key, fix); err != nil {
		m.metrics.emit(ctx, EventMemoError, 1)
		m.warn.warn("memo", "heal memo store failed", "err", err)
		return
	}
	m.metrics.emit(ctx, EventMemoStore, 1)
}

// forget deletes key, a remembered fix that no longer works.
func (m *memoRepairer) forget(ctx context.Context, key string) {
	if m.store == nil {
		return
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.timeout)
	defer cancel()
	if err := m.store.Delete(mctx, key); err != nil {
		m.metrics.emit(ctx, EventMemoError, 1)
		m.warn.warn("memo", "heal memo delete failed", "err", err)
		return
	}
	m.metrics.emit(ctx, EventMemoDelete, 1)
}
