package tenant

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// registryConfig and tokensConfig are the KV buckets this package keeps.
func registryConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: RegistryBucket, Description: "Paddock tenants (package tenant)",
		History: 1, Storage: jetstream.FileStorage, Replicas: replicas}
}

func tokensConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: TokensBucket, Description: "Paddock bearer tokens, by SHA-256 (package tenant)",
		History: 1, Storage: jetstream.FileStorage, Replicas: replicas}
}

// EnsureBuckets creates the registry and tokens buckets with replicas
// (1, 3 or 5) when they are missing, and moves existing ones to that
// count. replicas 0 does nothing: NewRegistry and NewTokens create a
// missing bucket at 1. It needs a user that may create and update streams
// (RoleAdmin, RoleScheduler).
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas == 0 {
		return nil
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for _, cfg := range []jetstream.KeyValueConfig{registryConfig(replicas), tokensConfig(replicas)} {
		if err := ensureKV(ctx, js, cfg); err != nil {
			return fmt.Errorf("tenant: bucket %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// ensureKV creates KV bucket cfg when it is missing, and otherwise sets the
// replicas of its stream to cfg.Replicas (when > 0), leaving every other
// setting as it is.
func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	st, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateKeyValue(ctx, cfg)
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return err
		}
		st, err = js.Stream(ctx, "KV_"+cfg.Bucket) // another process made it meanwhile
	}
	if err != nil {
		return err
	}
	sc := st.CachedInfo().Config
	if cfg.Replicas == 0 || sc.Replicas == cfg.Replicas {
		return nil
	}
	sc.Replicas = cfg.Replicas
	_, err = js.UpdateStream(ctx, sc)
	return err
}
