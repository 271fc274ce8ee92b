// Package streamfull tells whether a JetStream publish was refused for lack
// of room. The SDK (client.ErrStreamFull) and the fleet's results store
// (results.IsStreamFull) share this one test.
package streamfull

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes of a refused publish (nats-server
// jetstream_errors_generated.go; nats.go names only some of them).
const (
	// codeStoreFailed (JSStreamStoreFailedF) carries the store's reason as
	// its description: "maximum bytes exceeded" and "maximum messages
	// exceeded" when a DiscardNew stream is full.
	codeStoreFailed jetstream.ErrorCode = 10077
	// codeInsufficientResources (JSInsufficientResourcesErr) and
	// codeStorageExceeded (JSStorageResourcesExceededErr): the server's or
	// account's JetStream storage (max_file_store) is used up.
	codeInsufficientResources jetstream.ErrorCode = 10023
	codeStorageExceeded       jetstream.ErrorCode = 10047
)

// Is reports whether err is JetStream refusing a publish because the stream
// reached its MaxBytes (or MaxMsgs) with DiscardNew, or because the server's
// JetStream storage is used up. Such a publish stored nothing; it can
// succeed later, once space is freed.
func Is(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeStoreFailed:
		d := strings.ToLower(apiErr.Description)
		return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded")
	case codeInsufficientResources, codeStorageExceeded:
		return true
	}
	return false
}
