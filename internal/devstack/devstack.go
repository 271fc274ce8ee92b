// Package devstack starts what `paddock up` needs on a development machine
// when it is not already running: an embedded NATS server with JetStream
// and a redis-server child process, each on the address of its URL, with
// the data under a directory. With an Auth (LoadOrCreateAuth) NATS runs in
// operator mode and Redis requires a password, so that nothing on the
// machine gets in without the credentials kept in the data directory. It is
// for one machine; production runs NATS and Redis as services of their own
// (deploy/). Ensure is what `paddock up` calls: it uses the NATS and Redis
// that answer at their URLs and starts the others, with the data under
// DefaultDataDir unless told otherwise.
package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/paddockhq/paddock/internal/redact"
	"github.com/paddockhq/paddock/tenant"
)

// Addr is where a URL says a server listens.
type Addr struct {
	Host string
	Port int
}

func (a Addr) String() string { return net.JoinHostPort(a.Host, strconv.Itoa(a.Port)) }

// ParseAddr reads the host and port of the first server of a NATS URL list
// (nats://, tls://, or host:port) or of a redis:// / rediss:// URL. A URL
// without a port gets defPort; without a host, 127.0.0.1.
func ParseAddr(raw string, defPort int) (Addr, error) {
	first, _, _ := strings.Cut(raw, ",")
	first = strings.TrimSpace(first)
	if !strings.Contains(first, "://") {
		first = "nats://" + first
	}
	u, err := url.Parse(first)
	if err != nil || u.Host == "" && u.Opaque != "" {
		return Addr{}, fmt.Errorf("devstack: %q is not a host:port URL", redact.URL(raw))
	}
	if strings.Contains(strings.ToLower(u.Scheme), "sentinel") {
		return Addr{}, fmt.Errorf("devstack: %s names Sentinels; up starts one plain Redis only (start the Sentinels and their Redis yourself, or use redis://host:port)", redact.URL(raw))
	}
	if u.Scheme == "unix" {
		return Addr{}, fmt.Errorf("devstack: %s is a unix socket; up starts servers on TCP only (start redis-server on that socket yourself, or use redis://host:port)", redact.URL(raw))
	}
	a := Addr{Host: u.Hostname(), Port: defPort}
	if a.Host == "" {
		a.Host = "127.0.0.1"
	}
	if p := u.Port(); p != "" {
		if a.Port, err = strconv.Atoi(p); err != nil || a.Port < 0 || a.Port > 65535 {
			return Addr{}, fmt.Errorf("devstack: bad port %q in %s", p, redact.URL(raw))
		}
	}
	return a, nil
}

// NATSConfig is an embedded NATS server.
type NATSConfig struct {
	// Addr is where it listens.
	Addr Addr
	// StoreDir holds the JetStream file store (created 0700).
	StoreDir string
	// Auth, when set, runs the server in operator mode trusting it: only
	// users it issued connect (JetStream is in its PADDOCK account). Nil
	// runs the server without authentication.
	Auth *tenant.Authority
	// ResolverDir holds the account JWTs of operator mode, updated at run
	// time by Authority.PushAccount (default StoreDir/accounts).
	ResolverDir string
	// Logger gets one line when it has started (default slog.Default()).
	Logger *slog.Logger
}

// StartNATS starts an embedded NATS server with JetStream and waits until it
// accepts connections. Shut it down with Shutdown and WaitForShutdown. On
// port 0 it listens on a free port, which its Addr gives.
func StartNATS(cfg NATSConfig) (*server.Server, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: NATS store: %w", err)
	}
	port := cfg.Addr.Port
	if port == 0 { // the server picks a free one: Addr tells which
		port = server.RANDOM_PORT
	}
	opts := &server.Options{Host: cfg.Addr.Host, Port: port, JetStream: true,
		StoreDir: cfg.StoreDir, NoSigs: true, NoLog: true, ServerName: "paddock-up"}
	mode := "none"
	if cfg.Auth != nil {
		dir := cfg.ResolverDir
		if dir == "" {
			dir = filepath.Join(cfg.StoreDir, "accounts")
		}
		if err := cfg.Auth.ConfigureServer(opts, dir); err != nil {
			return nil, fmt.Errorf("devstack: embedded NATS: %w", err)
		}
		mode = "operator"
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("devstack: embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("devstack: embedded NATS did not start on %s (is the port taken?)", cfg.Addr)
	}
	log.Info("started embedded NATS with JetStream", "addr", ns.Addr().String(), "store", cfg.StoreDir, "auth", mode)
	return ns, nil
}

// RedisConfig is a redis-server child.
type RedisConfig struct {
	// Addr is where it listens. Port 0 picks a free port (Redis.Addr
	// gives it), again if another process takes it first.
	Addr Addr
	// Dir holds its append-only file, redis.log and, with a Password, the
	// redis.conf that holds it (created 0700).
	Dir string
	// Password, when set, turns the default user off and lets only User in
	// with it (all commands, keys and channels). It goes into a 0600
	// config file, never on the command line where ps would show it.
	Password string
	// User is the user that Password is for (default DefaultRedisUser).
	User string
	// Ping answers nil once the server at addr serves (the caller's
	// client, with its credentials); StartRedis waits for it up to 10 s.
	Ping func(ctx context.Context, addr Addr) error
	// Logger gets one line when it has started (default slog.Default()).
	Logger *slog.Logger
}

// Redis is a running redis-server child.
type Redis struct {
	cmd    *exec.Cmd
	addr   Addr
	exited chan struct{} // closed when the child has exited
}

// Addr is where the child listens.
func (r *Redis) Addr() Addr { return r.addr }

// errPortTaken is a redis-server that exited because its port was taken.
var errPortTaken = errors.New("the port is taken")

// pickTries is how often StartRedis picks a free port when another process
// takes the one it picked before redis-server binds it.
const pickTries = 5

// StartRedis starts redis-server with AOF (fsync every second) and
// noeviction, and waits until cfg.Ping answers.
func StartRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("devstack: no redis-server to start: `apt-get install -y redis-server` (make demo does)")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: Redis dir: %w", err)
	}
	acl, err := redisACL(cfg)
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		addr := cfg.Addr
		if cfg.Addr.Port == 0 {
			if addr.Port, err = freePort(addr.Host); err != nil {
				return nil, fmt.Errorf("devstack: pick a Redis port: %w", err)
			}
		}
		r, err := startRedisOn(ctx, bin, acl, addr, cfg)
		if err == nil {
			log.Info("started redis-server", "addr", addr.String(), "dir", cfg.Dir, "password", cfg.Password != "")
			return r, nil
		}
		if cfg.Addr.Port != 0 || try == pickTries || !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
}

// startRedisOn starts one redis-server on addr and waits until cfg.Ping
// answers there, or the child exits.
func startRedisOn(ctx context.Context, bin string, acl []string, addr Addr, cfg RedisConfig) (*Redis, error) {
	args := append(append([]string{}, acl...), "--bind", addr.Host, "--port", strconv.Itoa(addr.Port), "--dir", cfg.Dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction",
		"--save", "", "--daemonize", "no", "--loglevel", "warning", "--protected-mode", "yes")
	cmd := exec.Command(bin, args...)
	logPath := filepath.Join(cfg.Dir, "redis.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devstack: start redis-server: %w", err)
	}
	r := &Redis{cmd: cmd, addr: addr, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.exited) }()
	if err := r.await(ctx, func(ctx context.Context) error { return cfg.Ping(ctx, addr) }); err != nil {
		r.Stop()
		if b, _ := os.ReadFile(logPath); int64(len(b)) > start && strings.Contains(string(b[start:]), "Address already in use") {
			err = fmt.Errorf("%w (%v)", errPortTaken, err)
		}
		return nil, fmt.Errorf("devstack: redis-server did not answer on %s: %w (see %s)", addr, err, logPath)
	}
	return r, nil
}

// freePort is a port on host that nothing listened on a moment ago.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DefaultRedisUser is the Redis user of RedisConfig.Password.
const DefaultRedisUser = "paddock"

// redisACL writes the ACL of cfg into Dir/redis.conf (0600) and returns
// the arguments that load it; without a password it removes a stale one
// and returns none.
func redisACL(cfg RedisConfig) ([]string, error) {
	conf := filepath.Join(cfg.Dir, "redis.conf")
	if cfg.Password == "" {
		if err := os.Remove(conf); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		return nil, nil
	}
	user := cfg.User
	if user == "" {
		user = DefaultRedisUser
	}
	for what, v := range map[string]string{"user": user, "password": cfg.Password} {
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' || r == '\\' || r == '\'' }) {
			return nil, fmt.Errorf("devstack: the Redis %s must not hold spaces, quotes, backslashes or control characters", what)
		}
	}
	text := "# Written by paddock up: the only way in is the user below.\n" + aclUsers(user, cfg.Password)
	if err := writePrivate(conf, []byte(text)); err != nil {
		return nil, err
	}
	return []string{conf}, nil
}

// aclUsers is the Redis ACL of a dev stack, in the syntax of redis.conf and
// of an --aclfile alike: the default user off, user with password allowed
// everything.
func aclUsers(user, password string) string {
	return "user default off\nuser " + user + " on >" + password + " ~* &* +@all\n"
}

// Pid is the process id of the redis-server child.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// await polls ping every 50 ms for up to 10 s, or until the child exits.
func (r *Redis) await(ctx context.Context, ping func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		err := ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-r.exited:
			return fmt.Errorf("redis-server exited: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop asks redis-server to exit (SIGINT: it flushes the AOF) and waits.
func (r *Redis) Stop() {
	_ = r.cmd.Process.Signal(os.Interrupt)
	<-r.exited
}
