package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// debugFlags configure a service's loopback profiling endpoint.
type debugFlags struct {
	addr string
}

func (d *debugFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&d.addr, "debug-addr", "", "serve Go's pprof profiles (/debug/pprof/: heap, allocs, goroutine, profile) on this loopback address, e.g. 127.0.0.1:6060; empty disables")
}

// errDebugAddr refuses a --debug-addr that is not a loopback address:
// profiles show the process's memory, so they are never served beyond
// the host.
var errDebugAddr = errors.New("--debug-addr: not a loopback address (use 127.0.0.1:PORT or [::1]:PORT; profiles show the process's memory)")

// debugServer is a running pprof endpoint.
type debugServer struct {
	srv  *http.Server
	addr string // the address it listens on
	done chan struct{}
}

// startDebug serves net/http/pprof on d.addr (nothing when it is empty).
// The endpoint has its own mux: nothing else of the process is on it.
func startDebug(d *debugFlags, log *slog.Logger) (*debugServer, error) {
	if d.addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(d.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", errDebugAddr, d.addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%w: %q", errDebugAddr, d.addr)
	}
	ln, err := net.Listen("tcp", d.addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr %s: %w", d.addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &debugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug endpoint stopped", "component", "debug", "addr", d.addr, "err", err)
		}
	}()
	log.Info("debug endpoint serving pprof", "component", "debug", "addr", s.addr)
	return s, nil
}

// stop closes the endpoint (a profile being taken is cut). Nil-safe.
func (s *debugServer) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
