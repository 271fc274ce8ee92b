package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/tenant"
)

// The gateway's service user is granted the sessions bucket by name
// (package tenant), and package gateway uses it (it may not import tenant):
// the two names must be one.
func TestSessionsBucketNamesAgree(t *testing.T) {
	assert.Equal(t, tenant.SessionsBucket, gateway.SessionBucket)
}
