package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEndpointServesProbesAndMetrics(t *testing.T) {
	t.Parallel()
	var notReady error = errors.New("redis down")
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "paddock_x 1\n") })
	e, err := ServeEndpoint("127.0.0.1:0", metrics, func(ctx context.Context) error {
		_, ok := ctx.Deadline()
		assert.True(t, ok, "ready gets a deadline")
		return notReady
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + e.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	assert.Equal(t, 200, code)
	assert.Equal(t, "ok\n", body)
	code, body = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "not ready: redis down")
	notReady = nil
	code, body = get("/readyz")
	assert.Equal(t, 200, code)
	assert.Equal(t, "ready\n", body)
	code, body = get("/metrics")
	assert.Equal(t, 200, code)
	assert.Equal(t, "paddock_x 1\n", body)
	code, _ = get("/nothing")
	assert.Equal(t, 404, code)
}

func TestEndpointBadAddress(t *testing.T) {
	t.Parallel()
	_, err := ServeEndpoint("127.0.0.1:notaport", http.NotFoundHandler(), nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:notaport")
}
