package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Secrets is where the broker takes the values it injects: the operator's
// secret source. DirSecrets and EnvSecrets are the built-in ones; a Vault or
// cloud secret manager client is another implementation (it should cache,
// since the broker asks on every call). Implementations are safe for
// concurrent use, and their errors never hold a secret's value.
type Secrets interface {
	Secret(ctx context.Context, name string) (string, error)
}

// MinSecretLen is the shortest secret a source accepts: the broker redacts
// every occurrence of a secret in a response, which for a short value would
// mangle ordinary text (and a short secret is a weak one).
const MinSecretLen = 8

// maxSecretBytes bounds one secret file.
const maxSecretBytes = 64 << 10

// ErrNoSecret is wrapped by the error of a source that has no secret of the
// name asked for.
var ErrNoSecret = errors.New("broker: no such secret")

// ErrSecretSource is wrapped by the errors of a source that cannot be read
// (an unreadable or insecure file, a bad value).
var ErrSecretSource = errors.New("broker: secret source unusable")

// validSecretName reports whether name can name a secret: 1 to 128 of
// [A-Za-z0-9._-], not starting with '.' (it is a file name in DirSecrets).
func validSecretName(name string) bool {
	if name == "" || len(name) > 128 || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// checkValue returns why v cannot be a secret ("" if it can).
func checkValue(v string) string {
	if len(v) < MinSecretLen {
		return fmt.Sprintf("is %d bytes, under the minimum of %d", len(v), MinSecretLen)
	}
	return ""
}

// secretMap is a snapshot of secrets, replaced whole on reload.
type secretMap struct {
	mu sync.RWMutex
	m  map[string]string
}

func (s *secretMap) get(name string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[name]
	return v, ok
}

func (s *secretMap) set(m map[string]string) {
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// DirSecrets is a directory of secret files: the file "github-token" holds
// the secret github-token (one trailing newline is dropped). Files whose
// name starts with '.' are skipped (Kubernetes keeps its bookkeeping there;
// symlinks are followed). Every file must be readable by its owner only
// (mode 0600 or 0400). The directory is read by NewDirSecrets and again by
// Reload; a failed Reload keeps the previous secrets.
type DirSecrets struct {
	dir string
	secretMap
}

// NewDirSecrets reads the secrets of dir.
func NewDirSecrets(ctx context.Context, dir string) (*DirSecrets, error) {
	d := &DirSecrets{dir: dir}
	if err := d.Reload(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Reload reads the directory again (the worker calls it on SIGHUP). On an
// error the previous secrets stay.
func (d *DirSecrets) Reload(ctx context.Context) error {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSecretSource, err)
	}
	m := map[string]string{}
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		v, err := readSecretFile(filepath.Join(d.dir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if v == nil {
			continue
		}
		if !validSecretName(name) {
			errs = append(errs, fmt.Errorf("%w: %s: a secret's file name must be of [A-Za-z0-9._-]", ErrSecretSource, filepath.Join(d.dir, name)))
			continue
		}
		m[name] = *v
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.set(m)
	return nil
}

// readSecretFile reads one secret file; nil for a directory, or a file
// removed since the directory was listed (an operator replacing files).
func readSecretFile(path string) (*string, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretSource, err)
	}
	switch {
	case fi.IsDir():
		return nil, nil
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrSecretSource, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has mode %04o, so others may read the secret in it: run `chmod 600 %s`",
			ErrSecretSource, path, fi.Mode().Perm(), path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSecretSource, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrSecretSource, path, err)
	}
	if len(b) > maxSecretBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrSecretSource, path, maxSecretBytes)
	}
	v := string(b)
	v = strings.TrimSuffix(strings.TrimSuffix(v, "\n"), "\r")
	if why := checkValue(v); why != "" {
		return nil, fmt.Errorf("%w: the secret in %s %s", ErrSecretSource, path, why)
	}
	return &v, nil
}

// Secret returns the secret name.
func (d *DirSecrets) Secret(_ context.Context, name string) (string, error) {
	if v, ok := d.get(name); ok {
		return v, nil
	}
	return "", fmt.Errorf("%w %q: put it in the file %s (mode 0600) and reload the worker (SIGHUP)",
		ErrNoSecret, name, filepath.Join(d.dir, name))
}

// EnvSecrets takes secrets from the worker's environment: the secret
// github-token is the variable Prefix + "GITHUB_TOKEN" (upper case, '-' and
// '.' as '_'; EnvName). The environment is read by NewEnvSecrets and again
// by Reload. The sandbox passes none of the worker's environment to a box.
type EnvSecrets struct {
	prefix string
	secretMap
}

// NewEnvSecrets reads the variables that start with prefix (at least one
// character, e.g. "PADDOCK_SECRET_").
func NewEnvSecrets(ctx context.Context, prefix string) (*EnvSecrets, error) {
	if prefix == "" {
		return nil, fmt.Errorf("%w: an empty prefix would make every variable of the worker a secret: use e.g. PADDOCK_SECRET_", ErrSecretSource)
	}
	e := &EnvSecrets{prefix: prefix}
	if err := e.Reload(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// EnvName is the environment variable that holds secret name for prefix.
func EnvName(prefix, name string) string {
	return prefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))
}

// Reload reads the environment again. On an error the previous secrets stay.
func (e *EnvSecrets) Reload(context.Context) error {
	m := map[string]string{}
	var errs []error
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, e.prefix) {
			continue
		}
		if why := checkValue(v); why != "" {
			errs = append(errs, fmt.Errorf("%w: the secret in $%s %s", ErrSecretSource, k, why))
			continue
		}
		m[k] = v
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.set(m)
	return nil
}

// Secret returns the secret name.
func (e *EnvSecrets) Secret(_ context.Context, name string) (string, error) {
	k := EnvName(e.prefix, name)
	if v, ok := e.get(k); ok {
		return v, nil
	}
	return "", fmt.Errorf("%w %q: set $%s in the worker's environment", ErrNoSecret, name, k)
}
