package cli

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/tenant"
)

// The gateway's service user is granted the sessions bucket by name
// (package tenant), and package gateway uses it (it may not import tenant):
// the two names must be one.
func TestSessionsBucketNamesAgree(t *testing.T) {
	assert.Equal(t, tenant.SessionsBucket, gateway.SessionBucket)
}

// The gateway's flags become its Config: trusted proxies as addresses or
// CIDRs; insecure cookies only on a loopback listen address.
func TestGatewayFlagsConfig(t *testing.T) {
	f := gatewayFlags{addr: "127.0.0.1:8080", trustedProxies: []string{"10.0.0.0/8", "192.0.2.7", "::1"}, insecureCookies: true}
	cfg, err := f.config()
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("::1/128")}, cfg.TrustedProxies)
	assert.True(t, cfg.InsecureCookies)
	f.trustedProxies = []string{"proxy.example"}
	_, err = f.config()
	assert.ErrorContains(t, err, "--gateway-trusted-proxies")
	f.trustedProxies = nil
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:80"} {
		f.addr = addr
		_, err = f.config()
		assert.ErrorContains(t, err, "--gateway-insecure-cookies", addr)
	}
	for _, addr := range []string{"[::1]:8080", "localhost:8080", "127.0.0.2:1"} {
		f.addr = addr
		_, err = f.config()
		assert.NoError(t, err, addr)
	}
}
