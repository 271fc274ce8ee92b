// Package tenant holds Paddock's tenants: the record of each tenant and its
// quotas (Tenant), the registry of those records in a NATS KV bucket
// (Registry), and the NATS identities that keep tenants apart (Authority).
//
// Paddock runs NATS in operator mode (decentralized JWT authentication): an
// operator signs the system account SYS, the application account PADDOCK
// (JetStream on: every stream and bucket, and the services' users), and
// one account per tenant (account.go), whose only way into PADDOCK is the
// imports of that tenant's own subjects. Whatever the server publishes on
// a tenant's behalf (a reply, a consumer's delivery) stays in the tenant's
// account, so no tenant can make the server write into another's streams.
// A user's JWT also carries its role's permissions (Permissions).
// Credentials are the standard ".creds" files of nsc; revoking a user
// re-signs its account's JWT and pushes it to the servers
// (RevokeTenantUser, Revoke, PushAccount).
//
// Admin is tenant administration for a Go program connected as an admin
// user (what `paddock tenant` does): Add, Set, List, Remove, Reissue and
// Migrate keep a tenant's record, its account and users, and its streams
// in step. Tokens are the gateway's bearer tokens of tenants.
//
// The package imports only job of this project.
package tenant
