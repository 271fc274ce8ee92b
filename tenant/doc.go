// Package tenant holds Paddock's tenants: the record of each tenant and its
// quotas (Tenant), the registry of those records in a NATS KV bucket
// (Registry), and the NATS identities that keep tenants apart (Authority).
//
// Paddock runs NATS in operator mode (decentralized JWT authentication): an
// operator signs two accounts, the system account SYS and the application
// account PADDOCK (JetStream on), and PADDOCK signs one user per tenant and
// per service. A user's JWT carries its role's permissions (Permissions), so
// the NATS server, not the client, refuses a tenant that publishes to
// another tenant's subjects. Credentials are the standard ".creds" files of
// nsc; revoking a user re-signs the account JWT and pushes it to the
// servers (Revoke, PushAccount).
//
// The package imports only job of this project.
package tenant
