package redisurl

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paddockhq/paddock/internal/redact"
)

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("redisurl: invalid Redis URL")

// DefaultSentinelPort is the port of a Sentinel host given without one.
const DefaultSentinelPort = 26379

// Want lists the accepted forms, for error messages and flag help.
const Want = "redis://[user:password@]host[:port][/db], rediss://…, unix:///path/to/socket, " +
	"redis+sentinel://[user:password@]host:port[,host:port…]/<master>[/<db>] " +
	"or redis-sentinel://[:password@]host:port[,host:port…][/<db>]?master=<name>"

// Error is a URL that does not parse, or that a form does not allow.
type Error struct {
	Flag    string // the flag or variable the URL came from ("--redis-url")
	URL     string // the URL, credentials redacted
	Problem string // what is wrong with it
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %q is not a valid URL: %s; want %s", e.Flag, e.URL, e.Problem, Want)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// URL is a parsed --redis-url: exactly one of Single and Failover is set.
type URL struct {
	Single   *redis.Options
	Failover *redis.FailoverOptions
}

// Parse parses raw, which came from flag (named in errors).
func Parse(flag, raw string) (*URL, error) {
	bad := func(format string, args ...any) error {
		return &Error{Flag: flag, URL: redact.URL(raw), Problem: fmt.Sprintf(format, args...)}
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if raw == "" {
		return nil, bad("empty")
	}
	if !ok {
		return nil, bad("no scheme")
	}
	switch strings.ToLower(scheme) {
	case "redis", "rediss", "unix":
		return parseSingle(raw, bad)
	case "redis+sentinel", "rediss+sentinel":
		return parseSentinel(strings.ToLower(scheme), rest, false, bad)
	case "redis-sentinel":
		return parseSentinel("redis-sentinel", rest, true, bad)
	}
	return nil, bad("unknown scheme %q", scheme)
}

// parseSingle parses redis://, rediss:// and unix:// URLs (go-redis's
// ParseURL). A plain unix://path is taken as it is (any characters,
// relative or absolute); with credentials or parameters it is parsed like
// the others.
func parseSingle(raw string, bad func(string, ...any) error) (*URL, error) {
	if path, ok := strings.CutPrefix(raw, "unix://"); ok && path != "" && !strings.ContainsAny(path, "@?") {
		return &URL{Single: &redis.Options{Network: "unix", Addr: path}}, nil
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		if redact.URL(raw) != raw {
			// The parser's message can quote the URL, password included.
			return nil, bad("does not parse (the parser's message is left out: it could quote the password)")
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is quoted already
		}
		return nil, bad("%v", err)
	}
	return &URL{Single: opt}, nil
}

// parseSentinel parses the two Sentinel forms after their "scheme://".
// asynqForm: the master is the query's master=, the path only a db.
func parseSentinel(scheme, rest string, asynqForm bool, bad func(string, ...any) error) (*URL, error) {
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return nil, bad("a fragment (#…) is not allowed")
	}
	authority, path, _ := strings.Cut(rest, "/")
	fo := &redis.FailoverOptions{}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		var err error
		if fo.Username, fo.Password, err = userinfo(authority[:at]); err != nil {
			return nil, bad("%v", err)
		}
		authority = authority[at+1:]
	}
	addrs, err := sentinelAddrs(authority)
	if err != nil {
		return nil, bad("%v", err)
	}
	fo.SentinelAddrs = addrs
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, bad("the query does not parse")
	}
	if err := applyQuery(fo, q, asynqForm); err != nil {
		return nil, bad("%v", err)
	}
	if err := applyPath(fo, path, asynqForm); err != nil {
		return nil, bad("%v", err)
	}
	if scheme == "rediss+sentinel" {
		fo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &URL{Failover: fo}, nil
}

// userinfo decodes "user:password" (each part percent-encoded).
func userinfo(s string) (user, password string, err error) {
	u, p, _ := strings.Cut(s, ":")
	if user, err = url.PathUnescape(u); err != nil {
		return "", "", errors.New("the user name is not validly percent-encoded")
	}
	if password, err = url.PathUnescape(p); err != nil {
		return "", "", errors.New("the password is not validly percent-encoded")
	}
	return user, password, nil
}

// sentinelAddrs splits the comma-separated Sentinel list.
func sentinelAddrs(list string) ([]string, error) {
	if list == "" {
		return nil, errors.New("no Sentinel host")
	}
	var addrs []string
	for _, h := range strings.Split(list, ",") {
		if h == "" {
			return nil, errors.New("an empty host in the Sentinel list")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil { // no port (or a bare IPv6 address)
			host, port = strings.Trim(h, "[]"), strconv.Itoa(DefaultSentinelPort)
		}
		if host == "" || strings.ContainsAny(host, " /@[]") {
			return nil, fmt.Errorf("the Sentinel host %q is not a host name or address", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("the Sentinel %q: port %q is not a number from 1 to 65535", h, port)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// The query parameters of the Sentinel forms.
const (
	paramSentinelUser     = "sentinel_user"
	paramSentinelPassword = "sentinel_password"
	paramMaster           = "master"
	paramDialTimeout      = "dial_timeout"
)

func applyQuery(fo *redis.FailoverOptions, q url.Values, asynqForm bool) error {
	for name, vs := range q {
		if len(vs) != 1 {
			return fmt.Errorf("query parameter %s is given %d times", name, len(vs))
		}
		v := vs[0]
		switch {
		case name == paramSentinelUser:
			fo.SentinelUsername = v
		case name == paramSentinelPassword:
			fo.SentinelPassword = v
		case name == paramMaster && asynqForm:
			fo.MasterName = v
		case name == paramDialTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%s=%q is not a positive duration (e.g. 5s)", name, v)
			}
			fo.DialTimeout = d
		default:
			known := []string{paramSentinelUser, paramSentinelPassword, paramDialTimeout}
			if asynqForm {
				known = append(known, paramMaster)
			}
			return fmt.Errorf("unknown query parameter %q (known: %s)", name, strings.Join(known, ", "))
		}
	}
	if fo.SentinelUsername != "" && fo.SentinelPassword == "" {
		return errors.New("sentinel_user without sentinel_password")
	}
	return nil
}

// applyPath reads "<master>[/<db>]" (redis+sentinel) or "[<db>]"
// (redis-sentinel, whose master is in the query).
func applyPath(fo *redis.FailoverOptions, path string, asynqForm bool) error {
	segs := strings.Split(strings.TrimSuffix(path, "/"), "/")
	if path == "" || path == "/" {
		segs = nil
	}
	if !asynqForm {
		if len(segs) == 0 || segs[0] == "" {
			return errors.New("no master name: the path must name the master the Sentinels monitor (…/mymaster)")
		}
		m, err := url.PathUnescape(segs[0])
		if err != nil || strings.ContainsAny(m, " \t\r\n") {
			return fmt.Errorf("master name %q is not a valid name", segs[0])
		}
		fo.MasterName, segs = m, segs[1:]
	} else if fo.MasterName == "" {
		return errors.New("no master name: redis-sentinel:// needs ?master=<name>")
	}
	switch len(segs) {
	case 0:
		return nil
	case 1:
		db, err := strconv.Atoi(segs[0])
		if err != nil || db < 0 {
			return fmt.Errorf("database %q is not a number 0 or more", segs[0])
		}
		fo.DB = db
		return nil
	}
	return fmt.Errorf("path %q has more segments than <master>/<db>", "/"+path)
}

// IsSentinel reports whether u names a Sentinel-monitored master.
func (u *URL) IsSentinel() bool { return u.Failover != nil }

// SetAuth authenticates to the master and replicas (or the one server) as
// user with password, replacing what the URL gave; an empty user keeps the
// URL's, or defUser when the URL names none.
func (u *URL) SetAuth(user, password, defUser string) {
	if u.Failover != nil {
		u.Failover.Password, u.Failover.Username = password, pick(user, u.Failover.Username, defUser)
		return
	}
	u.Single.Password, u.Single.Username = password, pick(user, u.Single.Username, defUser)
}

func pick(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// SetTimeouts sets the socket timeouts of every connection (data nodes
// and Sentinels alike).
func (u *URL) SetTimeouts(dial, read, write time.Duration) {
	if u.Failover != nil {
		if u.Failover.DialTimeout == 0 {
			u.Failover.DialTimeout = dial
		}
		u.Failover.ReadTimeout, u.Failover.WriteTimeout = read, write
		return
	}
	u.Single.DialTimeout, u.Single.ReadTimeout, u.Single.WriteTimeout = dial, read, write
}

// NewClient returns the client: a plain one for a single server, else
// go-redis's failover client, which asks the Sentinels for the master and
// moves to the new one when they announce a failover (+switch-master).
func (u *URL) NewClient() *redis.Client {
	if u.Failover != nil {
		return redis.NewFailoverClient(u.Failover)
	}
	return redis.NewClient(u.Single)
}

// String describes where the client goes, without credentials.
func (u *URL) String() string {
	if u.Failover != nil {
		return fmt.Sprintf("master %q of Sentinels %s (db %d)", u.Failover.MasterName, strings.Join(u.Failover.SentinelAddrs, ","), u.Failover.DB)
	}
	return fmt.Sprintf("%s %s (db %d)", u.Single.Network, u.Single.Addr, u.Single.DB)
}
