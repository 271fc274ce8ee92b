package tenant_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

func TestTenantGrantIsExactlyItsSubjects(t *testing.T) {
	t.Parallel()
	p, err := tenant.Permissions(tenant.RoleTenant, "dev")
	require.NoError(t, err)
	assert.Subset(t, []string(p.Pub.Allow), []string{"paddock.jobs.submit.dev", "paddock.api.cancel.dev",
		"$JS.API.DIRECT.GET.PADDOCK_RESULTS_dev.paddock.results.dev.>", "paddock.api.jobs.dev"})
	// Everything else is about dev's own output stream and buckets.
	own := []string{"PADDOCK_OUTPUT_dev", "OBJ_paddock_out_dev", "OBJ_paddock_in_dev", "$O.paddock_in_dev."}
	for _, s := range p.Pub.Allow[4:] {
		if rest, ok := strings.CutPrefix(s, tenant.LocalAPIPrefix); ok {
			// The name an account mapping gives a JetStream API subject
			// of the grant (tenant/account.go).
			assert.Contains(t, p.Pub.Allow, "$JS.API."+rest)
			continue
		}
		assert.True(t, slices.ContainsFunc(own, func(o string) bool { return strings.Contains(s, o) }), s)
	}
	assert.ElementsMatch(t, []string{"_INBOX.dev.>", "paddock.results.dev.>", "paddock.output.dev.>"}, []string(p.Sub.Allow))
	assert.Empty(t, p.Pub.Deny)
	assert.Empty(t, p.Sub.Deny)
	assert.Nil(t, p.Resp)
	assert.Contains(t, p.Pub.Allow, job.SubmitSubject("dev"))
}

// A tenant's grant reaches nothing of another tenant, even one whose name
// starts with its own, nor any stream-changing API of its output.
func TestTenantGrantReachesNoOtherTenant(t *testing.T) {
	t.Parallel()
	p, err := tenant.Permissions(tenant.RoleTenant, "dev")
	require.NoError(t, err)
	for _, other := range []string{"devx", "de", "other"} {
		for _, s := range []string{
			job.SubmitSubject(other), job.ResultSubject(other, "a"), job.OutputSubject(other, "a"), job.JobsRequestSubject(other),
			"$JS.API.STREAM.INFO." + job.OutputStream(other),
			"$JS.API.CONSUMER.CREATE." + job.OutputStream(other) + ".c.paddock.output." + other + ".a",
			"$JS.API.CONSUMER.MSG.NEXT.OBJ_" + job.OutBucket(other) + ".c",
			"$JS.API.DIRECT.GET.OBJ_" + job.OutBucket(other) + ".$O." + job.OutBucket(other) + ".M.x",
			"$O." + job.InBucket(other) + ".C.x",
		} {
			for _, allow := range p.Pub.Allow {
				assert.False(t, server.SubjectsCollide(allow, s), "%s allows %s", allow, s)
			}
		}
	}
	for _, s := range []string{
		"$JS.API.STREAM.DELETE." + job.OutputStream("dev"), "$JS.API.STREAM.PURGE." + job.OutputStream("dev"),
		"$JS.API.STREAM.UPDATE.OBJ_" + job.OutBucket("dev"), "$JS.API.STREAM.PURGE.OBJ_" + job.OutBucket("dev"),
		"$O." + job.OutBucket("dev") + ".C.x", job.OutputSubject("dev", "a"),
	} {
		for _, allow := range p.Pub.Allow {
			assert.False(t, server.SubjectsCollide(allow, s), "%s allows %s", allow, s)
		}
	}
}

func TestNoRoleHasEmptyPermissions(t *testing.T) {
	t.Parallel()
	// Empty permissions mean "allow everything" to NATS.
	for _, role := range []tenant.Role{tenant.RoleScheduler, tenant.RoleWorker, tenant.RoleAdmin} {
		p, err := tenant.Permissions(role, "")
		require.NoError(t, err, role)
		assert.NotEmpty(t, p.Pub.Allow, role)
		assert.NotEmpty(t, p.Sub.Allow, role)
	}
	admin, err := tenant.Permissions(tenant.RoleAdmin, "")
	require.NoError(t, err)
	assert.Equal(t, []string{">"}, []string(admin.Pub.Allow))
}

func TestBadRoles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role   tenant.Role
		tenant string
		want   string
	}{
		{tenant.RoleTenant, "", "1 to 32"},
		{tenant.RoleTenant, "Bad.Name", "[a-z0-9-]"},
		{tenant.RoleTenant, ">", "[a-z0-9-]"},
		{tenant.RoleScheduler, "dev", "belongs to no tenant"},
		{tenant.Role("root"), "", "use tenant, scheduler, worker, gateway or admin"},
	} {
		_, err := tenant.Permissions(tc.role, tc.tenant)
		require.ErrorIs(t, err, tenant.ErrRole, "%s %q", tc.role, tc.tenant)
		assert.Contains(t, err.Error(), tc.want)
	}
	r, err := tenant.ParseRole("worker")
	require.NoError(t, err)
	assert.Equal(t, tenant.RoleWorker, r)
	_, err = tenant.ParseRole("superuser")
	assert.ErrorIs(t, err, tenant.ErrRole)
}

func TestGrantOfReturnsACopy(t *testing.T) {
	t.Parallel()
	g, err := tenant.GrantOf(tenant.RoleWorker, "")
	require.NoError(t, err)
	g.Pub[0] = ">"
	again, err := tenant.GrantOf(tenant.RoleWorker, "")
	require.NoError(t, err)
	assert.NotEqual(t, ">", again.Pub[0])
}
