package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"sort"
	"strings"
)

// headerTemplate is one header a grant injects: literal text with
// ${secret:NAME} and ${token} placeholders.
type headerTemplate struct {
	name  string // canonical
	parts []templatePart
}

type templatePart struct {
	lit    string
	secret string // a secret's name
	token  bool   // the grant's scoped token
}

// boxHeaders are the request headers of the box the broker passes on; every
// other header the box sends is dropped (Authorization, Cookie, Proxy-*,
// Host overrides, Forwarded, hop-by-hop headers, Accept-Encoding: the broker
// asks for an identity body, which it can check for secrets). Range and
// If-Range are dropped too: a secret asked for a few bytes at a time would
// come back in pieces too short to recognise; without them the upstream
// answers with the whole resource (RFC 9110 §14.2 lets a server ignore
// Range), and a 206 is refused (checkResponse).
var boxHeaders = map[string]bool{
	"Accept": true, "Accept-Language": true, "Cache-Control": true,
	"Content-Type": true, "Content-Language": true,
	"If-Match": true, "If-None-Match": true, "If-Modified-Since": true,
	"If-Unmodified-Since": true, "User-Agent": true,
}

// neverPassed are the headers a grant's pass_headers may not name.
var neverPassed = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true,
	"Host": true, "Forwarded": true, "X-Real-Ip": true, "Accept-Encoding": true,
	"Content-Length": true, "Content-Encoding": true, "Expect": true,
	"Range": true, "If-Range": true,
}

// hopByHop are the connection-level headers of RFC 9110 §7.6.1 (and the
// usual extras), which a proxy never forwards.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Proxy-Authenticate": true, "Proxy-Authorization": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// droppedResponse are the response headers never returned to the box: they
// carry or ask for credentials, or describe the upstream connection.
var droppedResponse = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true,
	"Www-Authenticate": true, "Authentication-Info": true,
	"Proxy-Authentication-Info": true, "Content-Length": true,
	"Content-Encoding": true, "Alt-Svc": true,
	// The broker answers whole resources only: no range is offered or
	// described to the box.
	"Accept-Ranges": true, "Content-Range": true,
}

// injectable reports why name cannot be injected ("" if it can).
func injectable(name string) string {
	switch c := textproto.CanonicalMIMEHeaderKey(name); {
	case !isToken(name):
		return "is not a header name"
	case hopByHop[c] || c == "Host" || c == "Content-Length" || c == "Content-Encoding" ||
		c == "Accept-Encoding" || c == "Expect" || strings.HasPrefix(c, "Proxy-"):
		return "is set by the broker itself and cannot be injected"
	}
	return ""
}

func parseHeaders(field string, hs map[string]string, bad func(field, format string, args ...any)) []headerTemplate {
	names := make([]string, 0, len(hs))
	for n := range hs {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []headerTemplate
	seen := map[string]bool{}
	for _, n := range names {
		f := fmt.Sprintf("%s[%q]", field, n)
		if why := injectable(n); why != "" {
			bad(f, "%s", why)
			continue
		}
		c := textproto.CanonicalMIMEHeaderKey(n)
		if seen[c] {
			bad(f, "%q is given twice (header names are case-insensitive)", c)
			continue
		}
		seen[c] = true
		parts, err := parseTemplate(hs[n])
		if err != "" {
			bad(f, "%s", err)
			continue
		}
		out = append(out, headerTemplate{name: c, parts: parts})
	}
	return out
}

// parseTemplate splits a header value into literal text and placeholders:
// ${secret:NAME} and ${token}. "$$" is a literal '$'.
func parseTemplate(v string) ([]templatePart, string) {
	var parts []templatePart
	var lit strings.Builder
	for rest := v; rest != ""; {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			lit.WriteString(rest)
			break
		}
		lit.WriteString(rest[:i])
		rest = rest[i:]
		if strings.HasPrefix(rest, "$$") {
			lit.WriteByte('$')
			rest = rest[2:]
			continue
		}
		end := strings.IndexByte(rest, '}')
		if !strings.HasPrefix(rest, "${") || end < 0 {
			return nil, "a '$' must start ${secret:NAME} or ${token} (write $$ for a literal '$')"
		}
		ph := rest[2:end]
		rest = rest[end+1:]
		p := templatePart{lit: lit.String()}
		lit.Reset()
		switch name, ok := strings.CutPrefix(ph, "secret:"); {
		case ph == "token":
			p.token = true
		case ok && validSecretName(name):
			p.secret = name
		default:
			return nil, fmt.Sprintf("${%s} is not ${secret:NAME} (NAME of [A-Za-z0-9._-]) or ${token}", ph)
		}
		parts = append(parts, p)
	}
	if lit.Len() > 0 {
		parts = append(parts, templatePart{lit: lit.String()})
	}
	for _, p := range parts {
		if strings.ContainsAny(p.lit, "\r\n\x00") {
			return nil, "a header value cannot hold a line break or NUL"
		}
	}
	return parts, ""
}

func parsePassHeaders(field string, names []string, bad func(field, format string, args ...any)) map[string]bool {
	out := map[string]bool{}
	for i, n := range names {
		c := textproto.CanonicalMIMEHeaderKey(n)
		switch {
		case !isToken(n):
			bad(fmt.Sprintf("%s[%d]", field, i), "%q is not a header name", n)
		case neverPassed[c] || hopByHop[c] || strings.HasPrefix(c, "Proxy-") || strings.HasPrefix(c, "X-Forwarded-"):
			bad(fmt.Sprintf("%s[%d]", field, i), "%s is never taken from the box", c)
		default:
			out[c] = true
		}
	}
	return out
}

// renderError is why a grant's headers could not be rendered.
type renderError struct {
	secret string
	msg    string
}

// render resolves g's header templates. token is the scoped token ("" when
// the grant has none). It returns the rendered headers, and what must never
// reach the box: the secret values (and the token) it used, and the
// rendered values that hold one.
func (g *grant) render(ctx context.Context, src Secrets, token string) (h http.Header, values, rendered []string, _ *renderError) {
	h = http.Header{}
	for _, t := range g.headers {
		var b strings.Builder
		secret := false
		for _, p := range t.parts {
			b.WriteString(p.lit)
			switch {
			case p.token:
				b.WriteString(token)
				values = append(values, token)
				secret = true
			case p.secret != "":
				v, err := src.Secret(ctx, p.secret)
				if err != nil {
					return nil, nil, nil, &renderError{secret: p.secret, msg: err.Error()}
				}
				if strings.ContainsAny(v, "\r\n\x00") {
					return nil, nil, nil, &renderError{secret: p.secret, msg: "it holds a line break or NUL, which no header can carry"}
				}
				b.WriteString(v)
				values = append(values, v)
				secret = true
			}
		}
		h.Set(t.name, b.String())
		if secret { // a literal header ("X-Api-Version: 2") is no secret
			rendered = append(rendered, b.String())
		}
	}
	return h, values, rendered, nil
}

// outgoingHeaders builds the upstream request's headers: the box's safe
// headers (boxHeaders and the grant's pass_headers), then the injected ones,
// which replace any box header of the same name.
func outgoingHeaders(box http.Header, g *grant, injected http.Header) http.Header {
	out := http.Header{}
	for name, vs := range box {
		if boxHeaders[name] || g.pass[name] {
			out[name] = append([]string(nil), vs...)
		}
	}
	for name, vs := range injected {
		out[name] = vs
	}
	out.Set("Accept-Encoding", "identity")
	return out
}

// responseHeaders copies the upstream response's headers that may reach the
// box: no hop-by-hop header (nor one named by Connection), no credential
// header, and none whose name or value holds a secret. It returns how many
// headers were dropped for holding a secret.
func responseHeaders(up http.Header, red *redactor) (http.Header, int) {
	conn := map[string]bool{}
	for _, v := range up.Values("Connection") {
		for _, n := range strings.Split(v, ",") {
			conn[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(n))] = true
		}
	}
	out := http.Header{}
	secret := 0
	for name, vs := range up {
		if hopByHop[name] || droppedResponse[name] || conn[name] {
			continue
		}
		if red.contains(name) || red.containsAny(vs) {
			secret++
			continue
		}
		out[name] = append([]string(nil), vs...)
	}
	return out, secret
}
