package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/paddockhq/paddock/job"
)

// Bounds and defaults of a grant (docs/broker.md). The broker holds a whole
// request and a whole response in memory (to check its size and to redact
// it), so the size caps are bounded.
const (
	DefaultMaxRequestBytes  = 1 << 20
	DefaultMaxResponseBytes = 10 << 20
	MaxBodyBytes            = 64 << 20 // the largest max_request_bytes or max_response_bytes
	DefaultTimeout          = 30 * time.Second
	MaxTimeout              = 10 * time.Minute
	DefaultRate             = 10 // requests per second, per grant and tenant (rates.go)
	DefaultBurst            = 20
	DefaultTokenTTL         = 5 * time.Minute
	MaxTokenTTL             = time.Hour
	maxGrantName            = 63
	maxPolicyBytes          = 4 << 20
)

// DefaultMethods are a grant's methods when its policy names none.
var DefaultMethods = []string{http.MethodGet, http.MethodHead}

// ErrPolicy is wrapped by every error about a policy file (*PolicyError).
var ErrPolicy = errors.New("broker: invalid policy")

// ErrNoGrant is wrapped by *GrantError: a job asked for a grant its tenant
// does not have.
var ErrNoGrant = errors.New("broker: grant not allowed")

// PolicyError is one problem of a policy file. Field names the place in the
// file ("grants[2].url"), empty for the file as a whole.
type PolicyError struct {
	Path  string // the file, when read by LoadPolicy
	Field string
	Msg   string
}

func (e *PolicyError) Error() string {
	var b strings.Builder
	b.WriteString("broker: policy")
	if e.Path != "" {
		b.WriteString(" " + e.Path)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

func (e *PolicyError) Unwrap() error { return ErrPolicy }

// GrantError says that Tenant may not use Grant (Check).
type GrantError struct {
	Tenant string
	Grant  string
	// Undefined is true when no grant of the policy has that name (a typo
	// in the job's spec, or a grant the operator removed).
	Undefined bool
	// Off is true when the fleet runs no broker (nil policy).
	Off bool
}

func (e *GrantError) Error() string {
	switch {
	case e.Off:
		return "broker: " + job.NoBrokerGrant(e.Grant)
	case e.Undefined:
		return fmt.Sprintf("broker: grant %q does not exist in the broker policy: check its spelling, or ask the operator to define it", e.Grant)
	}
	return fmt.Sprintf("broker: tenant %q has no grant %q: ask the operator to add it to the tenant in the broker policy", e.Tenant, e.Grant)
}

func (e *GrantError) Unwrap() error { return ErrNoGrant }

// Policy is a parsed policy file: the grants and which tenant has which. It
// is immutable and safe for concurrent use. A nil *Policy is a fleet without
// a broker: it grants nothing.
type Policy struct {
	grants  map[string]*grant
	tenants map[string][]string // sorted grant names
	secrets []string            // every secret name the grants use, sorted
	// secretRates are the rates of upstream credentials: one bucket per
	// secret, for every grant that injects it and every tenant.
	secretRates map[string]secretRate
}

// secretRate is the rate of one secret (secret_rates).
type secretRate struct {
	rate  rate.Limit
	burst int
}

// policyFile is the JSON of a policy file (docs/broker.md).
type policyFile struct {
	Version     int                  `json:"version"`
	Grants      []grantFile          `json:"grants"`
	Tenants     map[string][]string  `json:"tenants"`
	SecretRates map[string]*rateFile `json:"secret_rates"`
}

type grantFile struct {
	Name             string            `json:"name"`
	URL              string            `json:"url"`
	AllowHTTP        bool              `json:"allow_http"`
	Methods          []string          `json:"methods"`
	Paths            []string          `json:"paths"`
	Headers          map[string]string `json:"headers"`
	PassHeaders      []string          `json:"pass_headers"`
	MaxRequestBytes  int64             `json:"max_request_bytes"`
	MaxResponseBytes int64             `json:"max_response_bytes"`
	Timeout          string            `json:"timeout"`
	Rate             *rateFile         `json:"rate"`
	Token            *tokenFile        `json:"token"`
}

type rateFile struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

type tokenFile struct {
	Audience string `json:"audience"`
	TTL      string `json:"ttl"`
}

// grant is one parsed grant.
type grant struct {
	name       string
	base       *url.URL
	methods    []string
	paths      [][]string // segment patterns; "*" is any one segment
	headers    []headerTemplate
	pass       map[string]bool // extra box headers passed on (canonical names)
	maxReq     int64
	maxResp    int64
	timeout    time.Duration
	rate       rate.Limit
	burst      int
	token      *tokenSpec
	secretRefs []string
}

// tokenSpec is a grant's scoped token (token.go).
type tokenSpec struct {
	audience string
	ttl      time.Duration
}

// LoadPolicy reads and parses the policy file at path. The file names
// secrets but holds none; it must not be writable by group or others, who
// could otherwise grant themselves anything.
func LoadPolicy(path string) (*Policy, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, &PolicyError{Path: path, Msg: err.Error()}
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return nil, &PolicyError{Path: path, Msg: fmt.Sprintf(
			"mode %04o lets others change the grants: run `chmod go-w %s`", m, path)}
	}
	if fi.Size() > maxPolicyBytes {
		return nil, &PolicyError{Path: path, Msg: fmt.Sprintf("%d bytes is over the %d-byte limit", fi.Size(), maxPolicyBytes)}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &PolicyError{Path: path, Msg: err.Error()}
	}
	p, err := ParsePolicy(b)
	if err != nil {
		return nil, withPath(err, path)
	}
	return p, nil
}

// withPath sets Path on every *PolicyError of err (one, or joined).
func withPath(err error, path string) error {
	var pe *PolicyError
	if errors.As(err, &pe) {
		pe.Path = path
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			withPath(e, path)
		}
	}
	return err
}

// ParsePolicy parses a policy file. Unknown fields are errors (a typo must
// not silently widen or drop a rule). The error lists every problem, each a
// *PolicyError naming its field.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, &PolicyError{Msg: jsonMessage(data, err)}
	}
	if dec.More() {
		return nil, &PolicyError{Msg: "trailing data after the JSON object"}
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &PolicyError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if f.Version != 0 && f.Version != 1 {
		bad("version", "%d is not supported: use 1", f.Version)
	}
	p := &Policy{grants: map[string]*grant{}, tenants: map[string][]string{}}
	for i, gf := range f.Grants {
		field := fmt.Sprintf("grants[%d]", i)
		g := parseGrant(field, gf, bad)
		if g == nil {
			continue
		}
		if _, dup := p.grants[g.name]; dup {
			bad(field+".name", "%q is already the name of another grant", g.name)
			continue
		}
		p.grants[g.name] = g
	}
	p.parseTenants(f.Tenants, bad)
	p.secrets = p.secretNames()
	p.parseSecretRates(f.SecretRates, bad)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// parseSecretRates fills p.secretRates: each names a secret a grant uses.
func (p *Policy) parseSecretRates(rates map[string]*rateFile, bad func(field, format string, args ...any)) {
	p.secretRates = map[string]secretRate{}
	names := make([]string, 0, len(rates))
	for n := range rates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		field := fmt.Sprintf("secret_rates[%q]", n)
		if !slices.Contains(p.secrets, n) {
			bad(field, "no grant injects a secret named %q (a rate is for a ${secret:NAME} of a grant's headers)", n)
			continue
		}
		if rates[n] == nil {
			bad(field, "give per_second (and burst)")
			continue
		}
		r, b := parseRate(field, rates[n], bad)
		p.secretRates[n] = secretRate{rate: r, burst: b}
	}
}

// jsonMessage turns a decoding error into a message with a line number.
func jsonMessage(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	off := int64(-1)
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		if te.Field != "" {
			return fmt.Sprintf("%s: %s is not a %s (line %d)", te.Field, te.Value, te.Type, lineOf(data, off))
		}
	}
	switch {
	case off >= 0:
		return fmt.Sprintf("line %d: %v", lineOf(data, off), err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return "the JSON ends early (a missing '}' or ']'?)"
	}
	return err.Error()
}

func lineOf(data []byte, off int64) int {
	off = min(off, int64(len(data)))
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// parseTenants fills p.tenants, checking every name.
func (p *Policy) parseTenants(tenants map[string][]string, bad func(field, format string, args ...any)) {
	names := make([]string, 0, len(tenants))
	for t := range tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		field := fmt.Sprintf("tenants[%q]", t)
		if err := job.CheckTenant(t); err != nil {
			bad(field, "%v", err)
			continue
		}
		var list []string
		for i, g := range tenants[t] {
			if _, ok := p.grants[g]; !ok {
				bad(fmt.Sprintf("%s[%d]", field, i), "no grant is named %q: define it under grants", g)
				continue
			}
			if !slices.Contains(list, g) {
				list = append(list, g)
			}
		}
		sort.Strings(list)
		p.tenants[t] = list
	}
}

// parseGrant checks one grant; it returns nil when its name or URL is
// unusable (other problems are reported and the grant kept, so that every
// problem of the file is listed at once).
func parseGrant(field string, gf grantFile, bad func(field, format string, args ...any)) *grant {
	g := &grant{name: gf.Name}
	if err := checkGrantName(gf.Name); err != "" {
		bad(field+".name", "%s", err)
		return nil
	}
	g.base = parseBaseURL(field+".url", gf.URL, gf.AllowHTTP, bad)
	if g.base == nil {
		return nil
	}
	g.methods = parseMethods(field+".methods", gf.Methods, bad)
	for i, pat := range gf.Paths {
		segs, err := parsePattern(pat)
		if err != "" {
			bad(fmt.Sprintf("%s.paths[%d]", field, i), "%q: %s", pat, err)
			continue
		}
		g.paths = append(g.paths, segs)
	}
	g.maxReq = sizeCap(field+".max_request_bytes", gf.MaxRequestBytes, DefaultMaxRequestBytes, bad)
	g.maxResp = sizeCap(field+".max_response_bytes", gf.MaxResponseBytes, DefaultMaxResponseBytes, bad)
	g.timeout = duration(field+".timeout", gf.Timeout, DefaultTimeout, time.Millisecond, MaxTimeout, bad)
	g.rate, g.burst = parseRate(field+".rate", gf.Rate, bad)
	if gf.Token != nil {
		g.token = &tokenSpec{audience: gf.Token.Audience,
			ttl: duration(field+".token.ttl", gf.Token.TTL, DefaultTokenTTL, time.Second, MaxTokenTTL, bad)}
		if g.token.audience == "" {
			g.token.audience = g.name
		}
	}
	g.headers = parseHeaders(field+".headers", gf.Headers, bad)
	g.pass = parsePassHeaders(field+".pass_headers", gf.PassHeaders, bad)
	g.secretRefs = g.secretNames()
	usesToken := g.usesToken()
	switch {
	case g.token != nil && !usesToken:
		bad(field+".token", `no header uses ${token}: add one, e.g. "Authorization": "Bearer ${token}"`)
	case g.token == nil && usesToken:
		bad(field+".headers", `${token} is used but the grant has no "token": add "token": {}`)
	}
	return g
}

// checkGrantName returns why name cannot name a grant ("" if it can): it is
// the Host of the box's requests, so a DNS label: 1 to 63 of [a-z0-9-],
// starting with a letter, not ending with '-'.
func checkGrantName(name string) string {
	if name == "" || len(name) > maxGrantName {
		return fmt.Sprintf("%q must be 1 to %d characters", name, maxGrantName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || i > 0 && ('0' <= c && c <= '9' || c == '-')) {
			return fmt.Sprintf("%q: use [a-z0-9-], starting with a letter (it is the Host the box names)", name)
		}
	}
	if strings.HasSuffix(name, "-") {
		return fmt.Sprintf("%q must not end with '-'", name)
	}
	return ""
}

func parseBaseURL(field, raw string, allowHTTP bool, bad func(field, format string, args ...any)) *url.URL {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		bad(field, "missing: give the base URL of the real system, e.g. https://api.github.com")
		return nil
	case err != nil:
		bad(field, "%v", err)
		return nil
	case u.Scheme == "http" && !allowHTTP:
		bad(field, "%q is plain http: use https, or set \"allow_http\": true for a loopback test service", raw)
		return nil
	case u.Scheme != "https" && u.Scheme != "http":
		bad(field, "%q: the scheme must be https", raw)
		return nil
	case u.Host == "" || u.Hostname() == "":
		bad(field, "%q has no host", raw)
		return nil
	case u.User != nil:
		bad(field, "the URL holds credentials: put them in a secret and inject them with \"headers\"")
		return nil
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		bad(field, "%q: a base URL has no query or fragment", raw)
		return nil
	}
	if _, err := cleanTarget(strings.TrimSuffix(u.EscapedPath(), "/") + "/"); err != nil && u.Path != "" {
		bad(field, "%q: %s", raw, err.msg)
		return nil
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u
}

func parseMethods(field string, methods []string, bad func(field, format string, args ...any)) []string {
	if len(methods) == 0 {
		return slices.Clone(DefaultMethods)
	}
	var out []string
	for i, m := range methods {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !isToken(m) || m != strings.ToUpper(m):
			bad(f, "%q is not an HTTP method: use upper case, e.g. GET", m)
		case m == http.MethodConnect || m == http.MethodTrace:
			bad(f, "%s cannot be granted (it would tunnel out or echo the injected secret)", m)
		case !slices.Contains(out, m):
			out = append(out, m)
		}
	}
	return out
}

// parsePattern splits a path pattern into segments: it starts with '/', and
// each segment is literal text or "*" (any one segment). The pattern allows
// its own path and everything under it.
func parsePattern(pat string) ([]string, string) {
	if pat == "/" {
		return nil, ""
	}
	if !strings.HasPrefix(pat, "/") {
		return nil, "must start with '/'"
	}
	t, err := cleanTarget(strings.ReplaceAll(pat, "*", "x"))
	if err != nil {
		return nil, err.msg
	}
	if t.rawQuery != "" || strings.Contains(pat, "?") {
		return nil, "has a query: patterns match paths only"
	}
	if strings.Contains(pat, "%") {
		return nil, "write the pattern unescaped"
	}
	segs := strings.Split(strings.TrimSuffix(pat, "/")[1:], "/")
	for _, s := range segs {
		if strings.Contains(s, "*") && s != "*" {
			return nil, "'*' must be a whole segment"
		}
	}
	return segs, ""
}

func sizeCap(field string, v, def int64, bad func(field, format string, args ...any)) int64 {
	switch {
	case v == 0:
		return def
	case v < 0 || v > MaxBodyBytes:
		bad(field, "%d must be 1 to %d", v, MaxBodyBytes)
		return def
	}
	return v
}

func duration(field, raw string, def, lo, hi time.Duration, bad func(field, format string, args ...any)) time.Duration {
	if raw == "" {
		return def
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < lo || d > hi {
		bad(field, "%q must be a duration from %s to %s, e.g. \"30s\"", raw, lo, hi)
		return def
	}
	return d
}

func parseRate(field string, r *rateFile, bad func(field, format string, args ...any)) (rate.Limit, int) {
	if r == nil {
		return DefaultRate, DefaultBurst
	}
	if !(r.PerSecond > 0) || r.PerSecond > 1e6 || math.IsInf(r.PerSecond, 0) {
		bad(field+".per_second", "%v must be above 0 and at most 1e6 requests per second", r.PerSecond)
		return DefaultRate, DefaultBurst
	}
	burst := r.Burst
	switch {
	case burst == 0:
		burst = max(1, int(math.Ceil(r.PerSecond)))
	case burst < 0 || burst > 1e6:
		bad(field+".burst", "%d must be 1 to 1000000", burst)
		burst = 1
	}
	return rate.Limit(r.PerSecond), burst
}

// isToken reports whether s is an RFC 9110 token (a method or header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func (g *grant) secretNames() []string {
	var out []string
	for _, h := range g.headers {
		for _, p := range h.parts {
			if p.secret != "" && !slices.Contains(out, p.secret) {
				out = append(out, p.secret)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (g *grant) usesToken() bool {
	for _, h := range g.headers {
		for _, p := range h.parts {
			if p.token {
				return true
			}
		}
	}
	return false
}

// allowsPath reports whether the (clean) path segs is under one of the
// grant's patterns.
func (g *grant) allowsPath(segs []string) bool {
	if len(g.paths) == 0 {
		return true
	}
	for _, pat := range g.paths {
		if len(segs) < len(pat) {
			continue
		}
		ok := true
		for i, s := range pat {
			if s != "*" && s != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func (g *grant) patterns() string {
	if len(g.paths) == 0 {
		return "/"
	}
	out := make([]string, len(g.paths))
	for i, p := range g.paths {
		out[i] = "/" + strings.Join(p, "/")
	}
	return strings.Join(out, ", ")
}

func (p *Policy) secretNames() []string {
	var out []string
	for _, g := range p.grants {
		for _, s := range g.secretRefs {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Grants returns the names of tenant's grants, sorted (nil for a tenant
// the policy does not name, and on a nil Policy).
func (p *Policy) Grants(tenant string) []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.tenants[tenant])
}

// Secrets returns the names of the secrets the policy's grants use, sorted.
func (p *Policy) Secrets() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.secrets)
}

// Check returns nil when tenant has every grant in names. Otherwise it
// returns one *GrantError (wrapping ErrNoGrant) per grant it lacks, joined.
// The scheduler calls it for a job's "grants"; the broker applies the same
// rule again on every call (the policy may have changed since).
func (p *Policy) Check(tenant string, names []string) error {
	var errs []error
	for _, n := range names {
		if err := p.check(tenant, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Policy) check(tenant, name string) *GrantError {
	switch {
	case p == nil:
		return &GrantError{Tenant: tenant, Grant: name, Off: true}
	case p.grants[name] == nil:
		return &GrantError{Tenant: tenant, Grant: name, Undefined: true}
	case !slices.Contains(p.tenants[tenant], name):
		return &GrantError{Tenant: tenant, Grant: name}
	}
	return nil
}
