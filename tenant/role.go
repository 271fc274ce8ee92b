package tenant

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/jwt/v2"

	"github.com/paddockhq/paddock/job"
)

// Role is what a NATS user of Paddock is for; it decides the user's
// permissions (Permissions).
type Role string

// The roles.
const (
	// RoleTenant is a tenant's pipeline (the client SDK, the CLI's submit):
	// it may submit and cancel its own jobs and read its own results, and
	// nothing else.
	RoleTenant Role = "tenant"
	// RoleScheduler is the scheduler service.
	RoleScheduler Role = "scheduler"
	// RoleWorker is the worker service.
	RoleWorker Role = "worker"
	// RoleGateway is the HTTP/MCP gateway's own service user: it reads
	// the bearer tokens and the tenant registry and keeps the agent
	// sessions, and reaches nothing of any tenant (it acts for a tenant
	// through a user it mints for that tenant: Minter). Its connections
	// must use GatewayInboxPrefix (nats.CustomInboxPrefix).
	RoleGateway Role = "gateway"
	// RoleAdmin may do everything in the PADDOCK account: `paddock tenant
	// add/ls/rm`, the local operator, stream management.
	RoleAdmin Role = "admin"
)

// ServiceReplyPrefix starts the reply subject of a request that reached
// PADDOCK through a service import (the server's rewrite of the
// requester's reply subject); a service answering tenants may publish on it.
const ServiceReplyPrefix = "_R_."

// GatewayInboxPrefix is the inbox prefix of RoleGateway's connections. A
// tenant's name starts with a letter, so no tenant's inbox
// (job.InboxPrefix) is under it, nor is it under one of theirs.
const GatewayInboxPrefix = job.InboxPrefixRoot + "_gateway"

// SessionsBucket is the KV bucket of the gateway's agent sessions (package
// gateway owns its records; RoleGateway may create and change it).
const SessionsBucket = "paddock_sessions"

// ErrRole is wrapped by the errors about an unknown role or a role used
// with or without a tenant where it should not be.
var ErrRole = errors.New("tenant: bad role")

// SubjectOutputPrefix + tenant + "." + … carries the live output of a
// tenant's jobs.
const SubjectOutputPrefix = job.SubjectOutputPrefix

// Grant lists the subjects a role may publish and subscribe to (NATS
// wildcards allowed). Everything else is denied.
type Grant struct {
	Pub []string
	Sub []string
}

// serviceGrants are the grants of the services. They are the minimum the
// services were expected to need when this package was written (JetStream
// API and acks, KV of the tenant registry, flow control, inboxes); adjust
// them here when a service is found to need another subject (the server
// logs a "Permissions Violation" naming it).
var serviceGrants = map[Role]Grant{
	RoleScheduler: {
		// _R_.>: the reply subjects of requests that come from a tenant's
		// account through an import (its cancel and list requests).
		Pub: []string{"paddock.>", "$JS.API.>", "$JS.ACK.>", "_INBOX.>", "$KV." + RegistryBucket + ".>", "$JS.FC.>", ServiceReplyPrefix + ">"},
		Sub: []string{"paddock.>", "$JS.API.>", "$JS.ACK.>", "_INBOX.>", "$KV." + RegistryBucket + ".>", "$JS.FC.>"},
	},
	RoleWorker: {
		// $O.> and $JS.FC.>: Object Store chunks (kept output, artifacts)
		// and the flow control of reading input files. paddock.wake.>: a
		// worker's rescuer wakes idle workers for the rescue it enqueued.
		Pub: []string{job.SubjectResultPrefix + ">", SubjectOutputPrefix + ">", "$JS.API.>", "_INBOX.>", "$O.>", "$JS.FC.>", job.SubjectWakePrefix + ">"},
		Sub: []string{"_INBOX.>", job.SubjectCancelPrefix + ">", job.SubjectResultPrefix + ">", job.SubjectWakePrefix + ">"},
	},
	RoleGateway: gatewayGrant(),
	RoleAdmin:   {Pub: []string{">"}, Sub: []string{">"}},
}

// gatewayGrant is the grant of RoleGateway: read the tokens (TokensBucket)
// and the registry (RegistryBucket) by key, as Verify does (the bucket's
// info and a direct get of a key's last value; neither bucket's watchers
// or writes), create and use the sessions bucket (SessionsBucket: info,
// create, update, gets, puts, deletes, and the consumers of its watchers
// and key listings; creating a bucket asks for the account's JetStream
// info, $JS.API.INFO, which shows totals of the account and nothing of a
// tenant), and replies on GatewayInboxPrefix.
func gatewayGrant() Grant {
	pub := []string{}
	for _, b := range []string{TokensBucket, RegistryBucket} {
		pub = append(pub, "$JS.API.STREAM.INFO."+kvStream(b), "$JS.API.DIRECT.GET."+kvStream(b)+".$KV."+b+".>")
	}
	sess := kvStream(SessionsBucket)
	pub = append(pub, streamReader(sess)...)
	pub = append(pub, "$JS.API.INFO", "$JS.API.STREAM.CREATE."+sess, "$JS.API.STREAM.UPDATE."+sess, "$KV."+SessionsBucket+".>")
	return Grant{Pub: pub, Sub: []string{GatewayInboxPrefix + ".>"}}
}

// kvStream is the stream behind a KV bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// tenantGrant is the grant of tenant t: submit, cancel and list jobs as t,
// read t's results (live, and the last one of a job by a JetStream direct
// get), t's live output, and replies on t's own inbox prefix
// (job.InboxPrefix; the tenant's connections must use it:
// nats.CustomInboxPrefix).
//
// Agent I/O: t may read its live output stream (job.OutputStream) and its
// output and input buckets (job.OutBucket, job.InBucket) with stream infos
// and direct gets, write objects into its input bucket and purge it (the
// Object Store's overwrite). It may create no consumer: a consumer's
// deliver subject is one the server publishes on for the client, which no
// permission checks (see account.go). The grant is also exactly what t's
// account imports from PADDOCK (tenantImports).
func tenantGrant(t string) Grant {
	pub := tenantRequests(t)
	for _, s := range pub {
		if local, ok := localAPISubject(s); ok {
			// The server checks the subject an account mapping gives too.
			pub = append(pub, local)
		}
	}
	return Grant{
		Pub: pub,
		Sub: []string{
			job.InboxPrefix(t) + ".>",
			job.ResultSubjects(t),
			job.OutputSubjects(t),
		},
	}
}

// tenantRequests are the subjects tenant t publishes on: its requests to
// the fleet and to JetStream, and its uploads (see tenantGrant).
func tenantRequests(t string) []string {
	pub := []string{
		job.SubmitSubject(t),
		job.CancelRequestSubject(t),
		"$JS.API.DIRECT.GET." + job.ResultsStream(t) + "." + job.ResultSubjects(t),
		job.JobsRequestSubject(t),
	}
	for _, st := range []string{job.OutputStream(t), objStream(job.OutBucket(t)), objStream(job.InBucket(t))} {
		pub = append(pub, "$JS.API.STREAM.INFO."+st, "$JS.API.DIRECT.GET."+st, "$JS.API.DIRECT.GET."+st+".>")
	}
	in := job.InBucket(t)
	return append(pub, "$O."+in+".>", "$JS.API.STREAM.PURGE."+objStream(in))
}

// objStream is the stream behind an Object Store bucket.
func objStream(bucket string) string { return "OBJ_" + bucket }

// streamReader is what a client needs to read stream st: its info, direct
// gets, consumers (created with or without a filter in the subject,
// pulled, asked about, deleted) and the flow control of push consumers.
func streamReader(st string) []string {
	c := "$JS.API.CONSUMER."
	return []string{
		"$JS.API.STREAM.INFO." + st,
		"$JS.API.DIRECT.GET." + st, "$JS.API.DIRECT.GET." + st + ".>",
		c + "CREATE." + st, c + "CREATE." + st + ".>",
		c + "MSG.NEXT." + st + ".*", c + "INFO." + st + ".*", c + "DELETE." + st + ".*",
		"$JS.FC." + st + ".>",
	}
}

// GrantOf returns the subjects role may use; tenant names the tenant of
// RoleTenant and must be empty for the other roles.
func GrantOf(role Role, tenant string) (Grant, error) {
	if role == RoleTenant {
		if err := job.CheckTenant(tenant); err != nil {
			return Grant{}, fmt.Errorf("%w: %w", ErrRole, err)
		}
		return tenantGrant(tenant), nil
	}
	g, ok := serviceGrants[role]
	if !ok {
		return Grant{}, fmt.Errorf("%w: %q: use tenant, scheduler, worker, gateway or admin", ErrRole, role)
	}
	if tenant != "" {
		return Grant{}, fmt.Errorf("%w: role %s belongs to no tenant (got %q)", ErrRole, role, tenant)
	}
	return Grant{Pub: append([]string(nil), g.Pub...), Sub: append([]string(nil), g.Sub...)}, nil
}

// Current reports whether g allows exactly what role's grant allows today
// (GrantOf; the order of subjects does not matter): credentials issued
// before a grant changed are not current.
func (g Grant) Current(role Role, tenant string) bool {
	want, err := GrantOf(role, tenant)
	if err != nil {
		return false
	}
	same := func(a, b []string) bool {
		a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
		return slices.Equal(a, b)
	}
	return same(g.Pub, want.Pub) && same(g.Sub, want.Sub)
}

// Permissions returns the NATS permissions of role (see GrantOf). It never
// returns empty permissions, which NATS would read as "allow everything".
func Permissions(role Role, tenant string) (jwt.Permissions, error) {
	g, err := GrantOf(role, tenant)
	if err != nil {
		return jwt.Permissions{}, err
	}
	var p jwt.Permissions
	p.Pub.Allow.Add(g.Pub...)
	p.Sub.Allow.Add(g.Sub...)
	return p, nil
}

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if r != RoleTenant {
		if _, ok := serviceGrants[r]; !ok {
			return "", fmt.Errorf("%w: %q: use tenant, scheduler, worker, gateway or admin", ErrRole, s)
		}
	}
	return r, nil
}
