package gateway

import (
	"net/http"
	"time"
)

// fleet is GET /v1/fleet: the fleet as id's tenant may see it (Config.Fleet).
func (g *Gateway) fleet(w http.ResponseWriter, r *http.Request, id Identity) error {
	if g.cfg.Fleet == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable,
			Message: "this gateway has no fleet view (it was started without Redis)"}
	}
	v, err := g.cfg.Fleet(r.Context(), id.Tenant)
	if err != nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: codeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "the fleet view could not be read: " + err.Error()}
	}
	return writeJSON(w, http.StatusOK, v)
}
