package broker_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/broker"
)

func TestParsePolicyErrors(t *testing.T) {
	t.Parallel()
	grant := func(fields string) string {
		return `{"grants": [{"name": "ok", "url": "https://a.example"}, {"name": "g", "url": "https://api.example"` + fields + `}]}`
	}
	for _, tc := range []struct {
		name, policy, field, msg string
	}{
		{"syntax", `{"grants": [`, "", "the JSON ends early"},
		{"syntax-line", "{\n\"grants\": [}", "", "line 2: invalid character '}'"},
		{"unknown-field", `{"grant": []}`, "", `unknown field "grant"`},
		{"type", `{"grants": [{"name": 3}]}`, "", "grants.name: number is not a string"},
		{"version", `{"version": 2}`, "version", "2 is not supported"},
		{"name-missing", `{"grants": [{"url": "https://a.example"}]}`, "grants[0].name", "must be 1 to 63"},
		{"name-upper", `{"grants": [{"name": "GitHub", "url": "https://a.example"}]}`, "grants[0].name", "use [a-z0-9-]"},
		{"name-dup", `{"grants": [{"name": "a", "url": "https://a.example"}, {"name": "a", "url": "https://b.example"}]}`, "grants[1].name", "already the name"},
		{"url-missing", `{"grants": [{"name": "a"}]}`, "grants[0].url", "missing"},
		{"url-http", grant(`, "url": "http://api.example"`), "grants[1].url", `is plain http: use https, or set "allow_http"`},
		{"url-scheme", `{"grants": [{"name": "a", "url": "ftp://a.example"}]}`, "grants[0].url", "scheme must be https"},
		{"url-userinfo", `{"grants": [{"name": "a", "url": "https://u:p@a.example"}]}`, "grants[0].url", "holds credentials"},
		{"url-query", `{"grants": [{"name": "a", "url": "https://a.example/?x=1"}]}`, "grants[0].url", "no query"},
		{"url-nohost", `{"grants": [{"name": "a", "url": "https:///x"}]}`, "grants[0].url", "has no host"},
		{"url-dotdot", `{"grants": [{"name": "a", "url": "https://a.example/x/../y"}]}`, "grants[0].url", "dot segment"},
		{"method-lower", grant(`, "methods": ["get"]`), "grants[1].methods[0]", "use upper case"},
		{"method-trace", grant(`, "methods": ["TRACE"]`), "grants[1].methods[0]", "cannot be granted"},
		{"path-relative", grant(`, "paths": ["repos"]`), "grants[1].paths[0]", "must start with '/'"},
		{"path-dotdot", grant(`, "paths": ["/a/.."]`), "grants[1].paths[0]", "dot segment"},
		{"path-star", grant(`, "paths": ["/a*"]`), "grants[1].paths[0]", "whole segment"},
		{"path-query", grant(`, "paths": ["/a?b"]`), "grants[1].paths[0]", "query"},
		{"header-hop", grant(`, "headers": {"Connection": "close"}`), "grants[1].headers[\"Connection\"]", "set by the broker"},
		{"header-host", grant(`, "headers": {"host": "x"}`), "grants[1].headers[\"host\"]", "set by the broker"},
		{"header-bad-placeholder", grant(`, "headers": {"A": "${env:X}"}`), "grants[1].headers[\"A\"]", "is not ${secret:NAME}"},
		{"header-bare-dollar", grant(`, "headers": {"A": "a$b"}`), "grants[1].headers[\"A\"]", "write $$"},
		{"header-twice", grant(`, "headers": {"X-A": "1", "x-a": "2"}`), `grants[1].headers["x-a"]`, "given twice"},
		{"header-newline", grant(`, "headers": {"A": "a\nb"}`), "grants[1].headers[\"A\"]", "line break"},
		{"pass-auth", grant(`, "pass_headers": ["authorization"]`), "grants[1].pass_headers[0]", "never taken from the box"},
		{"pass-forwarded", grant(`, "pass_headers": ["X-Forwarded-For"]`), "grants[1].pass_headers[0]", "never taken from the box"},
		{"req-cap", grant(`, "max_request_bytes": -1`), "grants[1].max_request_bytes", "must be 1 to"},
		{"resp-cap", grant(`, "max_response_bytes": 1000000000`), "grants[1].max_response_bytes", "must be 1 to"},
		{"timeout", grant(`, "timeout": "forever"`), "grants[1].timeout", "must be a duration"},
		{"timeout-long", grant(`, "timeout": "1h"`), "grants[1].timeout", "from 1ms to 10m0s"},
		{"rate", grant(`, "rate": {"per_second": 0}`), "grants[1].rate.per_second", "above 0"},
		{"burst", grant(`, "rate": {"per_second": 1, "burst": -2}`), "grants[1].rate.burst", "1 to 1000000"},
		{"token-unused", grant(`, "token": {}`), "grants[1].token", "no header uses ${token}"},
		{"token-missing", grant(`, "headers": {"Authorization": "Bearer ${token}"}`), "grants[1].headers", `has no "token"`},
		{"token-ttl", grant(`, "token": {"ttl": "2h"}, "headers": {"A": "${token}"}`), "grants[1].token.ttl", "from 1s to 1h0m0s"},
		{"tenant-name", `{"tenants": {"Acme": []}}`, `tenants["Acme"]`, "invalid tenant name"},
		{"tenant-grant", `{"grants": [{"name": "a", "url": "https://a.example"}], "tenants": {"acme": ["a", "b"]}}`, `tenants["acme"][1]`, `no grant is named "b"`},
		{"secret-rate-unused", `{"grants": [{"name": "g", "url": "https://a.example", "headers": {"A": "${secret:k}"}}], "secret_rates": {"other": {"per_second": 1}}}`,
			`secret_rates["other"]`, `no grant injects a secret named "other"`},
		{"secret-rate-bad", `{"grants": [{"name": "g", "url": "https://a.example", "headers": {"A": "${secret:k}"}}], "secret_rates": {"k": {"per_second": 0}}}`,
			`secret_rates["k"].per_second`, "must be above 0"},
	} {
		_, err := broker.ParsePolicy([]byte(tc.policy))
		require.Error(t, err, tc.name)
		assert.ErrorIs(t, err, broker.ErrPolicy, tc.name)
		var pe *broker.PolicyError
		require.True(t, errors.As(err, &pe), tc.name)
		assert.Equal(t, tc.field, pe.Field, "%s: %v", tc.name, err)
		assert.Contains(t, err.Error(), tc.msg, tc.name)
		if tc.field != "" {
			assert.Contains(t, err.Error(), "broker: policy: "+tc.field+": ", tc.name)
		}
	}
}

func TestParsePolicyListsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := broker.ParsePolicy([]byte(`{"grants": [
		{"name": "a", "url": "https://a.example", "methods": ["get"], "timeout": "x"},
		{"name": "b", "url": "http://b.example"}]}`))
	require.Error(t, err)
	for _, f := range []string{"grants[0].methods[0]", "grants[0].timeout", "grants[1].url"} {
		assert.Contains(t, err.Error(), f)
	}
}

func TestPolicyGrantsAndCheck(t *testing.T) {
	t.Parallel()
	p, err := broker.ParsePolicy([]byte(`{
	  "grants": [
	    {"name": "zeta", "url": "https://z.example", "headers": {"Authorization": "Bearer ${secret:z}", "X-K": "${secret:k}-${secret:z}"}},
	    {"name": "alpha", "url": "http://127.0.0.1:9/base/", "allow_http": true}
	  ],
	  "tenants": {"acme": ["zeta", "alpha", "zeta"], "beta": []}
	}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"alpha", "zeta"}, p.Grants("acme"), "sorted, once each")
	assert.Empty(t, p.Grants("beta"))
	assert.Nil(t, p.Grants("nobody"))
	assert.Equal(t, []string{"k", "z"}, p.Secrets())

	assert.NoError(t, p.Check("acme", []string{"alpha", "zeta"}))
	assert.NoError(t, p.Check("beta", nil))

	err = p.Check("beta", []string{"zeta", "nosuch"})
	require.ErrorIs(t, err, broker.ErrNoGrant)
	var ge *broker.GrantError
	require.True(t, errors.As(err, &ge))
	assert.Equal(t, broker.GrantError{Tenant: "beta", Grant: "zeta"}, *ge)
	assert.Contains(t, err.Error(), `broker: tenant "beta" has no grant "zeta"`)
	assert.Contains(t, err.Error(), `broker: grant "nosuch" does not exist in the broker policy`)

	var off *broker.Policy // a fleet without a policy file
	assert.Nil(t, off.Grants("acme"))
	assert.NoError(t, off.Check("acme", nil))
	err = off.Check("acme", []string{"zeta"})
	require.True(t, errors.As(err, &ge))
	assert.True(t, ge.Off)
	assert.Contains(t, err.Error(), "this fleet runs no secrets broker")
}

func TestLoadPolicy(t *testing.T) {
	t.Parallel()
	p, err := broker.LoadPolicy("testdata/policy.json")
	require.NoError(t, err)
	assert.Equal(t, []string{"github-read", "inventory"}, p.Grants("acme"))

	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(`{}`), 0o666))
	require.NoError(t, os.Chmod(path, 0o666))
	_, err = broker.LoadPolicy(path)
	assert.ErrorIs(t, err, broker.ErrPolicy)
	assert.ErrorContains(t, err, "chmod go-w")

	require.NoError(t, os.WriteFile(path, []byte(`{"grants": [{"name": "x"}]}`), 0o644))
	require.NoError(t, os.Chmod(path, 0o644))
	_, err = broker.LoadPolicy(path)
	assert.ErrorContains(t, err, "broker: policy "+path+": grants[0].url: missing")
	_, err = broker.LoadPolicy(filepath.Join(dir, "none.json"))
	assert.ErrorIs(t, err, broker.ErrPolicy)
}

// TestDocExample: the worked example of docs/broker.md is the policy in
// testdata, and parses.
func TestDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/broker.md")
	require.NoError(t, err, "docs/broker.md documents the policy")
	_, rest, ok := strings.Cut(string(doc), "<!-- example: policy -->\n```json\n")
	require.True(t, ok, "docs/broker.md has the policy example")
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	file, err := os.ReadFile("testdata/policy.json")
	require.NoError(t, err)
	assert.Equal(t, string(file), block, "keep testdata/policy.json and the doc's example the same")
	_, err = broker.ParsePolicy([]byte(block))
	assert.NoError(t, err)
}
