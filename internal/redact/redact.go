// Package redact removes credentials from service URLs (NATS, Redis, an
// HTTP endpoint) before they are logged, printed or put into an error.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every credential.
const Mask = "xxxxx"

// URL returns raw with its credentials replaced by Mask:
//
//   - the password of the userinfo (the username stays: it names an
//     account, it does not open it);
//   - for NATS schemes (nats, tls, ws, wss), a userinfo without a password
//     too, since NATS reads it as a token;
//   - the value of every query parameter whose name looks like a
//     credential (pass, pwd, token, secret, key, auth, cred, sig, in any
//     case, anywhere in the name);
//   - each URL of a comma-separated NATS server list.
//
// A string that does not parse as a URL, or parses in a way that leaves an
// '@' outside the userinfo (a password holding an unescaped '/', '?' or
// '#'), is redacted as text: everything between the scheme and the last
// '@' is masked. URL never panics and never returns the password of
// malformed input. A URL without credentials comes back unchanged.
func URL(raw string) string {
	out := raw
	if pieces := strings.Split(raw, ","); len(pieces) > 1 {
		out = list(raw, pieces)
	} else if r, ok := parsed(raw); ok {
		out = r
	} else {
		out = textual(raw)
	}
	return secretParam.ReplaceAllString(out, "${1}"+Mask)
}

// list redacts a comma-separated server list piece by piece when every
// piece is a URL, else as one text.
func list(raw string, pieces []string) string {
	out := make([]string, len(pieces))
	for i, p := range pieces {
		// nats.go trims each server URL; keep the spaces around it.
		t := strings.TrimSpace(p)
		r, ok := parsed(t)
		if !ok {
			return textual(raw)
		}
		lead := p[:strings.Index(p, t)]
		out[i] = lead + r + p[len(lead)+len(t):]
	}
	return strings.Join(out, ",")
}

// parsed redacts the userinfo of a URL that parses cleanly; ok is false
// when raw must be redacted as text instead.
func parsed(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	ats := strings.Count(raw, "@")
	if (u.User == nil && ats > 0) || (u.User != nil && ats != 1) {
		// An '@' the parser did not take as the end of the userinfo: the
		// password may sit in the path, query or fragment.
		return "", false
	}
	if u.User == nil {
		return raw, true
	}
	name := u.User.Username()
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(name, Mask)
	} else if natsScheme[strings.ToLower(u.Scheme)] {
		u.User = url.User(Mask)
	} else {
		return raw, true
	}
	return u.String(), true
}

// natsScheme are the schemes whose password-less userinfo is a token.
var natsScheme = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// textual masks everything between the scheme (or the start) and the last
// '@', and replaces control characters.
func textual(raw string) string {
	out := raw
	if at := strings.LastIndexByte(raw, '@'); at >= 0 {
		start := 0
		if i := strings.Index(raw, "://"); i >= 0 && i+3 <= at {
			start = i + 3
		}
		out = raw[:start] + Mask + raw[at:]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, out)
}

// secretParam matches a query parameter named like a credential, up to
// the start of its value ($1), and its value (up to the next & or ;).
var secretParam = regexp.MustCompile(`(?i)([?&;#][^?&;#=]*(?:pass|pwd|token|secret|key|auth|cred|sig)[^?&;#=]*=)[^&;]*`)
