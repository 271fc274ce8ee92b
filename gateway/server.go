package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// The timeouts and bounds of NewServer.
const (
	// ReadHeaderTimeout bounds the request line and headers: a client
	// that dribbles its headers (slowloris) is cut.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the headers and body of a request together. It
	// does not cut a long wait or an event stream: net/http lifts the
	// connection's read deadline once the body has been read (at once, for
	// a request without one).
	ReadTimeout = 30 * time.Second
	// IdleTimeout bounds a keep-alive connection between requests.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes = 64 << 10
)

// NewServer returns an http.Server for h on addr with the timeouts above.
// It has no WriteTimeout, which would cut event streams and long waits:
// the API's handlers set their own write deadlines with
// http.ResponseController, an event stream one per event (net/http clears
// a handler's deadline when its request ends); a handler of h that may
// write to a client that stops reading must do the same. Closing it is
// the caller's (Shutdown).
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(slog.Default().With("component", "gateway").Handler(), slog.LevelWarn),
	}
}
