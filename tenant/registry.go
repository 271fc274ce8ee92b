package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RegistryBucket is the JetStream KV bucket of the tenant records, one key
// per tenant name.
const RegistryBucket = "PADDOCK_TENANTS"

var (
	// ErrNotFound is wrapped when the registry has no tenant of that name.
	ErrNotFound = errors.New("tenant: not found")
	// ErrExists is wrapped when Create finds the tenant already there.
	ErrExists = errors.New("tenant: already exists")
)

// defaultTimeout bounds a registry call whose context has no deadline.
const defaultTimeout = 10 * time.Second

// Registry is the set of tenant records, in the KV bucket RegistryBucket
// (file storage, one revision kept per tenant). It is safe for concurrent
// use.
type Registry struct {
	kv jetstream.KeyValue
}

// NewRegistry binds the bucket, creating it when it does not exist.
func NewRegistry(ctx context.Context, js jetstream.JetStream) (*Registry, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	kv, err := js.KeyValue(ctx, RegistryBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, registryConfig(0))
		if errors.Is(err, jetstream.ErrBucketExists) { // another process created it meanwhile
			kv, err = js.KeyValue(ctx, RegistryBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tenant: registry bucket %s: %w", RegistryBucket, err)
	}
	return &Registry{kv: kv}, nil
}

// Put stores t, replacing the record of the same name. A zero CreatedAt is
// set to now.
func (r *Registry) Put(ctx context.Context, t Tenant) error {
	b, err := encodeRecord(&t)
	if err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if _, err := r.kv.Put(ctx, t.Name, b); err != nil {
		return fmt.Errorf("tenant: put %s: %w", t.Name, err)
	}
	return nil
}

// Create stores t unless a tenant of that name exists (ErrExists). A zero
// CreatedAt is set to now.
func (r *Registry) Create(ctx context.Context, t Tenant) error {
	b, err := encodeRecord(&t)
	if err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if _, err := r.kv.Create(ctx, t.Name, b); errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w: %s", ErrExists, t.Name)
	} else if err != nil {
		return fmt.Errorf("tenant: create %s: %w", t.Name, err)
	}
	return nil
}

// Get returns the tenant named name, or an error wrapping ErrNotFound.
func (r *Registry) Get(ctx context.Context, name string) (Tenant, error) {
	if err := (&Tenant{Name: name}).Validate(); err != nil {
		return Tenant{}, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	e, err := r.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Tenant{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant: get %s: %w", name, err)
	}
	return decodeRecord(name, e.Value())
}

// ErrNoAccount is wrapped when a tenant's record names no account (it was
// recorded before tenants had accounts).
var ErrNoAccount = errors.New("tenant: no account")

// Accounts returns an AccountLookup (for a Minter) that reads a tenant's
// account from its record, each look-up bounded by defaultTimeout.
func (r *Registry) Accounts() AccountLookup {
	return func(name string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), defaultTimeout)
		defer cancel()
		t, err := r.Get(ctx, name)
		if err != nil {
			return "", err
		}
		if t.Account == "" {
			return "", fmt.Errorf("%w: tenant %s was recorded before tenants had accounts: run `paddock tenant migrate` (or restart `paddock up`)", ErrNoAccount, name)
		}
		return t.Account, nil
	}
}

// List returns every tenant, by name.
func (r *Registry) List(ctx context.Context) ([]Tenant, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	all, err := listAll(ctx, r.kv, "tenant: list", func(e jetstream.KeyValueEntry) (Tenant, bool, error) {
		t, err := decodeRecord(e.Key(), e.Value())
		return t, true, err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	return all, nil
}

// listAll decodes every current entry of kv with decode, which says
// whether to keep it; op prefixes the errors.
func listAll[T any](ctx context.Context, kv jetstream.KeyValue, op string, decode func(jetstream.KeyValueEntry) (T, bool, error)) ([]T, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer stopWatcher(w)
	var all []T
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", op, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New(op + ": the watcher stopped (connection closed?)")
			}
			if e == nil { // every current record was delivered
				return all, nil
			}
			v, keep, err := decode(e)
			if err != nil {
				return nil, err
			}
			if keep {
				all = append(all, v)
			}
		}
	}
}

// Delete removes the tenant named name, or returns an error wrapping
// ErrNotFound. It does not revoke the tenant's user (Authority.Revoke).
func (r *Registry) Delete(ctx context.Context, name string) error {
	if err := (&Tenant{Name: name}).Validate(); err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	e, err := r.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("tenant: delete %s: %w", name, err)
	}
	if err := r.kv.Delete(ctx, name, jetstream.LastRevision(e.Revision())); err != nil {
		return fmt.Errorf("tenant: delete %s: %w", name, err)
	}
	return nil
}

func encodeRecord(t *Tenant) ([]byte, error) {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(t)
}

// decodeRecord decodes the record stored under key.
func decodeRecord(key string, b []byte) (Tenant, error) {
	var t Tenant
	if err := json.Unmarshal(b, &t); err != nil {
		return Tenant{}, fmt.Errorf("%w: record %q: %w", ErrInvalid, key, err)
	}
	if t.Name != key {
		return Tenant{}, fmt.Errorf("%w: record %q names tenant %q", ErrInvalid, key, t.Name)
	}
	if err := t.Validate(); err != nil {
		return Tenant{}, fmt.Errorf("record %q: %w", key, err)
	}
	return t, nil
}

// stopWatcher stops w and drains it: the watcher's callback may be blocked
// on a full channel, and the channel closes once the subscription is gone.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	for range w.Updates() {
	}
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultTimeout)
}
