package gateway

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/paddockhq/paddock/job"
)

// openapiSource is the OpenAPI 3.1 document of the HTTP API as written by
// hand: paths, parameters, responses and the gateway's own schemas. The
// job's schemas are not copied into it: openapiDocument merges them in
// from package job (job.SpecSchema, job.ResultSchema), so that the served
// document cannot drift from the wire types.
//
//go:embed openapi.json
var openapiSource []byte

// openapiDoc is the whole document GET /v1/openapi.json serves.
var openapiDoc = sync.OnceValues(openapiDocument)

// openapiDocument merges the job's JSON Schemas into openapiSource's
// components: "Spec" and "Result" with each of their $defs as "Spec.<name>"
// and "Result.<name>", and "JobSubmission", the body of POST /v1/jobs: a
// Spec plus the gateway's "session".
func openapiDocument() ([]byte, error) {
	var doc map[string]any
	if err := decodeJSON(openapiSource, &doc); err != nil {
		return nil, fmt.Errorf("gateway: openapi.json: %w", err)
	}
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	if schemas == nil {
		return nil, fmt.Errorf("gateway: openapi.json has no components.schemas")
	}
	for _, s := range []struct {
		name string
		raw  []byte
	}{{"Spec", job.SpecSchema}, {"Result", job.ResultSchema}} {
		parts, err := schemaComponents(s.name, s.raw)
		if err != nil {
			return nil, err
		}
		for k, v := range parts {
			if _, dup := schemas[k]; dup {
				return nil, fmt.Errorf("gateway: openapi.json defines %s, which the job's schemas provide", k)
			}
			schemas[k] = v
		}
	}
	sub, err := schemaComponents("Spec", job.SpecSchema)
	if err != nil {
		return nil, err
	}
	spec := sub["Spec"].(map[string]any)
	spec["title"] = "Paddock job submission"
	spec["description"] = "A job spec (Spec) plus the gateway's own field session."
	props, ok := spec["properties"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("gateway: the job's spec schema has no properties")
	}
	props["session"] = map[string]any{
		"description": "Run the job in this agent session's workspace (mounted rw at /workspace; made on first use); the spec must then name no volume.",
		"$ref":        "#/components/schemas/SessionName",
	}
	schemas["JobSubmission"] = spec
	return json.MarshalIndent(doc, "", "  ")
}

// schemaComponents turns a JSON Schema document into components: the
// schema itself as name, each of its $defs as name.<def>, with their
// $refs rewritten.
func schemaComponents(name string, raw []byte) (map[string]any, error) {
	var s map[string]any
	if err := decodeJSON(raw, &s); err != nil {
		return nil, fmt.Errorf("gateway: the job's %s schema: %w", name, err)
	}
	defs, _ := s["$defs"].(map[string]any)
	delete(s, "$defs")
	delete(s, "$schema")
	delete(s, "$id") // it would change the base of the $refs
	out := map[string]any{name: rewriteRefs(s, name)}
	for k, d := range defs {
		out[name+"."+k] = rewriteRefs(d, name)
	}
	return out, nil
}

// rewriteRefs turns "#/$defs/x" into "#/components/schemas/<prefix>.x"
// throughout v.
func rewriteRefs(v any, prefix string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#/$defs/") {
				x[k] = "#/components/schemas/" + prefix + "." + strings.TrimPrefix(s, "#/$defs/")
				continue
			}
			x[k] = rewriteRefs(e, prefix)
		}
	case []any:
		for i, e := range x {
			x[i] = rewriteRefs(e, prefix)
		}
	}
	return v
}

// decodeJSON decodes with numbers kept as written.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
