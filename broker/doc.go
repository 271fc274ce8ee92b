// Package broker is Paddock's secrets broker: the part of the worker, outside
// the sandbox, through which a job reaches a real system without ever
// holding its key.
//
// The operator's policy file (Policy, LoadPolicy) names grants: a base URL,
// the methods and paths a job may use under it, the headers to inject with
// values from the operator's secret source (Secrets: DirSecrets,
// EnvSecrets, or any other implementation such as a Vault client), size caps,
// a timeout and a rate. It gives each tenant a set of grants; a job asks for
// grants by name, and Policy.Check refuses a grant its tenant lacks.
//
// A Broker serves one job per call of Serve, on a listener the worker makes
// for that job's box (a unix socket mounted in the box). Inside the box a
// plain HTTP client names the grant as the Host:
//
//	curl --unix-socket /.paddock/broker.sock http://github-read/repos/x/y
//
// The broker refuses anything the grant does not allow with a one-line
// message naming the grant and the rule (Rule), injects the secret, performs
// the request with TLS verification and no redirects, strips secret-bearing
// headers from the response, redacts any secret the upstream echoed in the
// body (as it streams in, in every common encoding), refuses partial and
// compressed answers (so a secret never comes back in pieces), and records
// the call (Call, CallLog), a span and metrics, never with a secret. A
// grant's rate is per grant and tenant (Limiter; RedisLimiter for a fleet). When the job ends its grants end: the listener is closed and
// every further call is refused.
//
// A grant may also carry a scoped token instead of (or next to) a secret: a
// short-lived JWT signed with Ed25519, bound to the tenant, the job and the
// grant, that expires with the job (Broker.JWKS publishes the public key).
//
// Holder is a process's broker over a policy file: the policy in force
// for the scheduler's grant check and, once serving, the Broker of a
// worker, both reloaded together (Reload, which cmd/paddock calls on
// SIGHUP).
//
// docs/broker.md describes the policy file with a worked example.
//
// The package imports only job of this project.
package broker
