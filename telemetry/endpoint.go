package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Endpoint is a service's HTTP endpoint for operators: /metrics
// (Prometheus), /healthz (the process answers) and /readyz (the process
// can do its work: ready returns nil).
type Endpoint struct {
	srv *http.Server
	ln  net.Listener
}

// ServeEndpoint listens on addr and serves metrics and the two probes until
// Shutdown. ready gets a context with a 3 s deadline; a nil ready is
// always ready.
func ServeEndpoint(addr string, metrics http.Handler, ready func(context.Context) error, log *slog.Logger) (*Endpoint, error) {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			rctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			defer cancel()
			if err := ready(rctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("telemetry: metrics endpoint %s: %w", addr, err)
	}
	e := &Endpoint{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}}
	go func() {
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz, /readyz", "addr", ln.Addr().String())
	return e, nil
}

// Addr is the address the endpoint listens on.
func (e *Endpoint) Addr() string { return e.ln.Addr().String() }

// Shutdown stops the endpoint, letting requests in flight finish until ctx
// ends.
func (e *Endpoint) Shutdown(ctx context.Context) error { return e.srv.Shutdown(ctx) }
