package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// A --redis-url naming a master the Sentinels do not monitor fails at
// start with what they said, not go-redis's "all sentinels are
// unreachable"; the data nodes' password never shows.
func TestSentinelUnknownMasterSaysSo(t *testing.T) {
	t.Parallel()
	ha := testsvc.StartRedisHA(t, testsvc.RedisHAConfig{Auth: true})
	ns := testsvc.StartNATS(t)
	bad := strings.Replace(ha.URL(), "/"+ha.Master, "/nosuchmaster", 1)
	code, out := runCLI(t, "scheduler", "--nats-url", ns.URL, "--redis-url", bad)
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, out, `does not know master "nosuchmaster"`)
	assert.Contains(t, out, ha.Master, "names the master they monitor")
	assert.NotContains(t, out, ha.Password)
}
