package cli

import (
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --debug-addr serves pprof on loopback only, and nothing when empty.
func TestDebugEndpoint(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	s, err := startDebug(&debugFlags{}, log)
	require.NoError(t, err)
	assert.Nil(t, s)
	s.stop() // nil-safe

	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:6060", ":6060", "nonsense"} {
		_, err := startDebug(&debugFlags{addr: addr}, log)
		assert.ErrorIs(t, err, errDebugAddr, addr)
	}

	var d debugFlags
	fs := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	d.register(fs)
	require.NoError(t, fs.Parse([]string{"--debug-addr", "127.0.0.1:0"}))
	s, err = startDebug(&d, log)
	require.NoError(t, err)
	defer s.stop()
	resp, err := http.Get("http://" + s.addr + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(b), "heap profile")
}
