// Package job holds Paddock's wire contract: the job Spec a pipeline submits,
// the Result every accepted job ends with, the closed set of terminal Reasons,
// the operator Caps a spec is validated against, and the NATS subject and
// header names the other packages share.
//
// It imports only the standard library so that every other package (and
// external pipelines) can depend on it. The JSON shapes are versioned ("v": 1)
// and described by schema/spec.schema.json and schema/result.schema.json; the
// human-readable contract is docs/job-contract.md.
package job
