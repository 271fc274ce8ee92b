package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/paddockhq/paddock/"

// imports lists the project packages that the non-test files of dir
// import (their paths relative to the module).
func imports(t *testing.T, dir string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join("..", "..", dir))
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join("..", "..", dir, e.Name()), nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if rel, ok := strings.CutPrefix(p, module); ok {
				got[rel] = true
			}
		}
	}
	return got
}

// helper tells whether imp is a small shared helper under internal/ that
// imports no project package itself (startstop, redact, retrydelay …).
func helper(t *testing.T, imp string) bool {
	if !strings.HasPrefix(imp, "internal/") || strings.HasPrefix(imp, "internal/testsvc") {
		return false
	}
	for sub := range imports(t, imp) {
		if !helper(t, sub) {
			return false
		}
	}
	return true
}

func TestImportRule(t *testing.T) {
	// Leaves: no project package but their own subpackages and helpers.
	for _, leaf := range []string{"job", "locks", "sandbox", "sandbox/initproto", "telemetry"} {
		for imp := range imports(t, leaf) {
			assert.True(t, strings.HasPrefix(imp, leaf+"/") || imp == "sandbox/initproto" && leaf == "sandbox" || helper(t, imp),
				"%s imports %s", leaf, imp)
		}
	}
	for imp := range imports(t, "healer") {
		assert.True(t, imp == "job" || helper(t, imp), "healer depends only on job and interfaces it declares; it imports %s", imp)
	}
	for imp := range imports(t, "gateway") {
		assert.True(t, imp == "client" || imp == "job" || helper(t, imp), "the gateway is a NATS client like any pipeline: it imports %s", imp)
	}
	for imp := range imports(t, "broker") {
		assert.True(t, imp == "job" || helper(t, imp), "broker imports only job; it imports %s", imp)
	}
	for imp := range imports(t, "tenant") {
		assert.True(t, imp == "job" || helper(t, imp), "tenant imports only job; it imports %s", imp)
	}
	assert.NotContains(t, imports(t, "scheduler"), "worker")
	assert.NotContains(t, imports(t, "worker"), "scheduler")
	for _, pkg := range []string{"client", "results", "scheduler", "worker", "healer", "locks", "sandbox", "gateway", "tenant", "broker"} {
		for imp := range imports(t, pkg) {
			assert.False(t, strings.HasPrefix(imp, "cmd/") || imp == "cli", "%s imports %s: only cli and cmd wire", pkg, imp)
		}
	}
	// cmd/paddock is the process over the command tree, nothing more.
	assert.Equal(t, map[string]bool{"cli": true}, imports(t, "cmd/paddock"))
}

// The client SDK (and the wire types) reach nothing of the server: a
// pipeline that imports them gets nats.go, OpenTelemetry's API and the
// standard library, not asynq, Redis, Prometheus, gRPC, Docker or the
// OpenTelemetry SDK.
func TestClientPullsInNoServer(t *testing.T) {
	forbidden := []string{"github.com/hibiken/asynq", "github.com/redis/", "github.com/prometheus/", "google.golang.org/grpc",
		"github.com/moby/", "github.com/docker/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters",
		"github.com/nats-io/nats-server"}
	for _, pkg := range []string{"client", "job"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/paddockhq/paddock/"+pkg).Output()
		require.NoError(t, err, "go list -deps %s", pkg)
		deps := strings.Fields(string(out))
		t.Logf("%s: %d packages", pkg, len(deps))
		for _, d := range deps {
			for _, f := range forbidden {
				assert.False(t, strings.HasPrefix(d, f), "%s depends on %s", pkg, d)
			}
			if strings.HasPrefix(d, "github.com/paddockhq/paddock/") {
				own := strings.TrimPrefix(d, "github.com/paddockhq/paddock/")
				assert.True(t, own == pkg || own == "job" || strings.HasPrefix(own, "internal/") || own == "telemetry/propagate",
					"%s depends on the project's %s", pkg, own)
			}
		}
	}
}
