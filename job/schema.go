package job

import _ "embed"

// SpecSchema is the JSON Schema (draft 2020-12) of a Spec document
// (schema/spec.schema.json). It holds the fixed rules; Validate adds the
// operator's caps. Treat it as read-only.
//
//go:embed schema/spec.schema.json
var SpecSchema []byte

// ResultSchema is the JSON Schema (draft 2020-12) of a Result document
// (schema/result.schema.json). Treat it as read-only.
//
//go:embed schema/result.schema.json
var ResultSchema []byte
