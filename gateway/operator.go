package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"time"
)

// The operator's pages. The gateway's tokens are tenants' (Config.Auth);
// the operator has one token of its own, set when the gateway starts
// (Config.OperatorToken), which opens the routes marked operator and
// nothing else. A tenant's token is refused there (403), and the operator
// token is refused on every tenant route (403): it names no tenant, so it
// can reach no tenant's jobs. The dashboard logs the operator in with the
// same token (ui.go), and its operator fleet page reads
// GET /v1/operator/fleet.

// minOperatorToken is the shortest operator token Config accepts.
const minOperatorToken = 32

// isOperatorToken reports whether token is the operator token, in time
// independent of where they differ.
func (g *Gateway) isOperatorToken(token string) bool {
	if g.cfg.OperatorToken == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(g.cfg.OperatorToken))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// roleRefusal is the 403 of a route the identity's role may not use.
func roleRefusal(rt apiRoute, id Identity) *apiError {
	switch {
	case rt.operator && !id.Operator:
		return &apiError{Status: http.StatusForbidden, Code: codeForbidden,
			Message: rt.pattern + " is the operator's: it needs the operator token (the gateway's --gateway-operator-token-file), not a tenant's"}
	case !rt.operator && id.Operator:
		return &apiError{Status: http.StatusForbidden, Code: codeForbidden,
			Message: "the operator token opens the operator's pages only (" + rt.pattern + " is a tenant's: use a tenant's token)"}
	}
	return nil
}

// operatorFleet is GET /v1/operator/fleet: the operator's fleet view
// (Config.OperatorFleet), naming hosts.
func (g *Gateway) operatorFleet(w http.ResponseWriter, r *http.Request, _ Identity) error {
	if g.cfg.OperatorFleet == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
			Message: "this gateway has no operator fleet view (it was started without Redis)"}
	}
	v, err := g.cfg.OperatorFleet(r.Context())
	if err != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "the operator fleet view could not be read: " + err.Error()}
	}
	return writeJSON(w, http.StatusOK, v)
}
