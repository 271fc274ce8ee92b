package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inspectorCLI is the MCP Inspector's CLI, pinned in
// gateway/testdata/inspector (package-lock.json) and installed there by
// `make inspector`.
const inspectorCLI = "../gateway/testdata/inspector/node_modules/.bin/mcp-inspector-cli"

// gatewayURLRE finds the gateway's base URL in `paddock up`'s stderr.
var gatewayURLRE = regexp.MustCompile(`paddock: gateway on (http://\S+)`)

// spillPathRE finds the stdout spill file a cut bash answer names.
var spillPathRE = regexp.MustCompile(`/workspace/\.paddock/out/[A-Za-z0-9._-]+\.stdout`)

// The reference MCP client, the Inspector CLI, against a real `paddock up`
// with the dev tenant's bearer token: it reconnects for every call, so the
// named session (?session=insp) keeps the three calls in one workspace. It
// lists exactly one tool, bash; a 1.3 MB output comes back capped at
// 10,000 characters with the spill file named; the next call pages that
// file and gets exactly the lines it asked for.
func TestInspectorCLI(t *testing.T) {
	bin := inspectorBinary(t)
	s := startUp(t)
	m := gatewayURLRE.FindStringSubmatch(s.stderr.String())
	require.NotNil(t, m, "paddock up did not say where its gateway is (is --gateway-addr off?):\n%s", s.stderr)
	token := readDevToken(t, s.dir)
	url := m[1] + "/mcp?session=insp"
	inspect := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		argv := append([]string{"--cli", url, "--transport", "http", "--header", "Authorization: Bearer " + token}, args...)
		cmd := exec.CommandContext(ctx, bin, argv...)
		// The CLI (1.0.3) looks for "../package.json" from its working
		// directory but imports it relative to its own module: run it where
		// the first exists (node_modules, under our package.json).
		cmd.Dir = filepath.Dir(filepath.Dir(bin))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "mcp-inspector-cli %s:\nstdout: %s\nstderr: %s\npaddock up:\n%s", strings.Join(args, " "), out, &stderr, s.stderr)
		return out
	}

	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	out := inspect("--method", "tools/list")
	require.NoError(t, json.Unmarshal(out, &list), "tools/list: %s", out)
	require.Len(t, list.Tools, 1, "exactly one tool: %s", out)
	assert.Equal(t, "bash", list.Tools[0].Name)

	// A multi-step task in one session: write a script, run it, page its
	// spilled output.
	text := callText(t, inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=echo 'seq 200000' > /workspace/gen.sh"))
	require.True(t, strings.HasPrefix(text, "exit 0 · ok · "), "status line: %.200s", text)
	text = callText(t, inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=sh /workspace/gen.sh"))
	assert.True(t, strings.HasPrefix(text, "exit 0 · ok · "), "status line: %.200s", text)
	assert.LessOrEqual(t, utf8.RuneCountInString(text), 10_000, "the answer is capped")
	assert.Contains(t, text, "1\n2\n3\n", "the answer starts with the head of the output")
	assert.Contains(t, text, "199999\n200000\n", "and ends with its tail")
	spill := spillPathRE.FindString(text)
	require.NotEmpty(t, spill, "the cut answer names its spill file:\n%s", text)

	text = callText(t, inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=sed -n '100000,100002p' "+spill))
	status, body, _ := strings.Cut(text, "\n")
	assert.True(t, strings.HasPrefix(status, "exit 0 · ok · "), "status line: %s", status)
	assert.Equal(t, "100000\n100001\n100002\n", body, "the spill file, paged in the same session's workspace")
}

// inspectorBinary is the Inspector CLI's absolute path; a missing install
// fails the test (never skips it) with what to run.
func inspectorBinary(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(inspectorCLI)
	require.NoError(t, err)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the MCP Inspector CLI is not installed (%v): run `make inspector` (make test does it first)", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not on PATH (%v): run `make setup` (it installs nodejs)", err)
	}
	return bin
}

// readDevToken reads the dev tenant's bearer token that `paddock up`
// wrote into its data dir, checking that only its owner may read it.
func readDevToken(t *testing.T, dataDir string) string {
	t.Helper()
	path := filepath.Join(dataDir, "auth", "dev.token")
	info, err := os.Stat(path)
	require.NoError(t, err, "paddock up writes the dev tenant's token")
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s is the owner's only", path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	token := strings.TrimSpace(string(b))
	require.NotEmpty(t, token, "%s is empty", path)
	return token
}

// callText is the text of a tools/call answer the Inspector CLI printed;
// an error answer fails the test.
func callText(t *testing.T, out []byte) string {
	t.Helper()
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	require.NoError(t, json.Unmarshal(out, &res), "tools/call: %s", out)
	require.Len(t, res.Content, 1, "one text block: %s", out)
	require.Equal(t, "text", res.Content[0].Type)
	require.False(t, res.IsError, "an error answer: %s", res.Content[0].Text)
	return res.Content[0].Text
}
