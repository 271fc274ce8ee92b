package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock/job"
)

// The MCP server: one tool, bash (bash.go), over streamable HTTP at /mcp
// (stateful: each MCP session is an agent session with its own
// workspace) or over stdio (`paddock mcp`: the process is the session).
//
// An MCP session lives in the memory of the gateway that created it (the
// SDK keeps it there): behind a load balancer, route /mcp by the
// Mcp-Session-Id header. Its workspace, though, is in the session store
// and on the fleet's volumes: when a gateway goes away, the sweeper of any
// other gateway ends the sessions it left once they are idle.

// serverName is the name the server gives in its initialize answer.
const serverName = "paddock"

// identityKey is the TokenInfo.Extra key of a request's Identity.
const identityKey = "paddock.identity"

// endTimeout bounds the end of a session whose MCP session closed: the
// delete job's wait and a margin.
func (g *Gateway) endTimeout() time.Duration { return g.cfg.MaxWait + 30*time.Second }

// mcpServer returns an MCP server whose bash tool runs in the session
// refOf names for each call.
func (g *Gateway) mcpServer(refOf func(*mcp.CallToolRequest) (SessionRef, error)) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: serverName, Title: "Paddock sandboxes"},
		// No logging capability: the server only has its tool.
		&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{}})
	mcp.AddTool(srv, bashTool(), func(ctx context.Context, req *mcp.CallToolRequest, in bashInput) (*mcp.CallToolResult, any, error) {
		ref, err := refOf(req)
		if err != nil {
			return g.toolError(err.Error()), nil, nil
		}
		return g.runBash(ctx, ref, in), nil, nil
	})
	return srv
}

// mcpHTTP serves MCP over streamable HTTP, stateful, with sessions closed
// after SessionIdleTTL without a request. Every request needs a bearer
// token (Config.Auth); the SDK refuses a session id presented with the
// token of another tenant (403), since TokenInfo.UserID is the tenant.
func (g *Gateway) mcpHTTP() http.Handler {
	srv := g.mcpServer(g.httpSessionRef)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: g.cfg.SessionIdleTTL,
		Logger:         g.log.With("part", "mcp"),
		// Every request needs a bearer token, which a browser tricked by
		// DNS rebinding does not have; the check would refuse a reverse
		// proxy on localhost that forwards the public Host.
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
		MaxRequestBodyBytes:          g.cfg.MaxBodyBytes,
	})
	authed := auth.RequireBearerToken(g.verifyToken, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	return g.mcpGuard(authed(g.mcpLimit(g.mcpSessionCap(srv, namedSession(writeDeadlines(h))))))
}

// mcpGuard refuses, before any lookup, the token of a request from an
// address over its failed credentials (guard.go): 429 with Retry-After.
// verifyToken counts the failures and successes.
func (g *Gateway) mcpGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token, ok := bearerToken(r.Header.Get("Authorization")); ok {
			addr := clientAddr(r, g.cfg.TrustedProxies)
			if ok, wait := g.guard.admit(addr, token, time.Now()); !ok {
				writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: codeRateLimited, RetryAfter: wait,
					Message: fmt.Sprintf("too many failed credentials from your address %s (the gateway allows %g a second, burst %d): "+
						"retry after the Retry-After seconds, with a valid token", addr, g.cfg.AuthFailRate, g.cfg.AuthFailBurst)})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// mcpSlots counts the MCP sessions of each token open on this gateway
// (the SDK keeps them in its memory), against Config.MaxMCPSessions.
type mcpSlots struct {
	mu   sync.Mutex
	open map[string]int // limitKey → sessions open or being opened
}

// take reserves one session of key; false when key holds max already.
func (s *mcpSlots) take(key string, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= max {
		return false
	}
	if s.open == nil {
		s.open = map[string]int{}
	}
	s.open[key]++
	return true
}

// release frees one session of key.
func (s *mcpSlots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key]--; s.open[key] <= 0 {
		delete(s.open, key)
	}
}

// mcpSessionCap bounds the MCP sessions of a token: a request that may
// open one (a POST without Mcp-Session-Id asking to "initialize") first
// takes a slot of its token
// (429 too_many_sessions when they are all taken); the slot is kept when
// the SDK answered with a new session, and freed when that session closes
// (the client's DELETE, SessionIdleTTL without a request, the gateway's
// shutdown); else at once.
func (g *Gateway) mcpSessionCap(srv *mcp.Server, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || !opensSession(r) {
			next.ServeHTTP(w, r)
			return
		}
		id, _ := identityOf(auth.TokenInfoFromContext(r.Context()))
		key := limitKey(id)
		if !g.mcps.take(key, g.cfg.MaxMCPSessions) {
			writeError(w, &apiError{Status: http.StatusTooManyRequests, Code: codeTooManySessions, Message: fmt.Sprintf(
				"token %s holds %d MCP sessions on this gateway, its cap (MaxMCPSessions, --gateway-max-mcp-sessions): "+
					"close one (HTTP DELETE /mcp with its Mcp-Session-Id) or reuse it; an unused one closes after %s",
				id.TokenID, g.cfg.MaxMCPSessions, g.cfg.SessionIdleTTL)})
			return
		}
		next.ServeHTTP(w, r)
		var ss *mcp.ServerSession
		if sid := w.Header().Get("Mcp-Session-Id"); sid != "" {
			for s := range srv.Sessions() {
				if s.ID() == sid {
					ss = s
				}
			}
		}
		if ss == nil {
			g.mcps.release(key)
			return
		}
		g.watch(ss, SessionRef{Tenant: id.Tenant, Kind: SessionMCP, Name: ss.ID()}, func() { g.mcps.release(key) })
	})
}

// peekBytes bounds what opensSession reads of a body before the SDK does.
const peekBytes = 64 << 10

// opensSession reports whether an MCP POST asks to open a session: a
// JSON-RPC "initialize", alone or in a batch. Other sessionless requests
// (the SDK's "server/discover" comes first) take no slot: one that held a
// slot until its handler returned made the client's initialize, sent as
// soon as the answer arrived, find a slot still taken. It reads at most
// peekBytes and puts them back; a body it cannot read whole counts as
// opening one (the cap then errs on the safe side).
func opensSession(r *http.Request) bool {
	head, err := io.ReadAll(io.LimitReader(r.Body, peekBytes))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil {
		return true
	}
	type msg struct {
		Method string `json:"method"`
	}
	var one msg
	if json.Unmarshal(head, &one) == nil {
		return one.Method == "initialize"
	}
	var batch []msg
	if json.Unmarshal(head, &batch) != nil {
		return true
	}
	for _, m := range batch {
		if m.Method == "initialize" {
			return true
		}
	}
	return false
}

// writeDeadlines sets a write deadline of writeStall before every write
// and flush of an MCP response: the server has no WriteTimeout (it would
// cut event streams), so a client that stops reading is dropped here
// instead of holding its handler forever.
func writeDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w)}, r)
	})
}

// deadlineWriter sets a write deadline of writeStall before each write
// and flush (MCP responses, downloads); wrote says whether any write
// began.
type deadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	wrote bool
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(writeStall))
	d.wrote = true
	return d.ResponseWriter.Write(p)
}

func (d *deadlineWriter) Flush() {
	_ = d.rc.SetWriteDeadline(time.Now().Add(writeStall))
	_ = d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// namedSessionHeader carries the ?session= of an MCP request to the tool
// handler (the SDK passes handlers the headers, not the URL); a client's
// own header of that name is dropped.
const namedSessionHeader = "Paddock-Session"

// namedSession checks the ?session=NAME of an MCP request (the rule of
// the HTTP API's "session") and passes it on in namedSessionHeader.
func namedSession(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(namedSessionHeader)
		if name := r.URL.Query().Get("session"); name != "" {
			if err := checkAPISessionName(name); err != nil {
				http.Error(w, "session: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Header.Set(namedSessionHeader, name)
		}
		h.ServeHTTP(w, r)
	})
}

// verifyToken is the SDK's token verifier over Config.Auth: the tenant is
// the TokenInfo's UserID, the Identity is in its Extra.
func (g *Gateway) verifyToken(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
	id, err := g.cfg.Auth.Authenticate(ctx, token)
	if errors.Is(err, ErrUnauthorized) {
		g.guard.failed(clientAddr(r, g.cfg.TrustedProxies), time.Now())
		return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
	}
	if err != nil {
		g.log.Warn("mcp: the token store failed", "err", err)
		return nil, fmt.Errorf("gateway: the token store failed (%w); retry later", err)
	}
	if err := job.CheckTenant(id.Tenant); err != nil {
		// An empty UserID would turn off the SDK's check that a session
		// stays with the tenant that opened it.
		g.log.Error("mcp: the authenticator returned no valid tenant", "err", err)
		return nil, fmt.Errorf("gateway: the token maps to no valid tenant (%w)", err)
	}
	g.guard.succeeded(token, time.Now())
	return &auth.TokenInfo{UserID: id.Tenant, Extra: map[string]any{identityKey: id}}, nil
}

// mcpLimit applies the per-token request rate (Config.Rate, Burst) to MCP
// requests: over it, 429 with Retry-After.
func (g *Gateway) mcpLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := identityOf(auth.TokenInfoFromContext(r.Context()))
		if ok, after := g.lim.allow(limitKey(id), time.Now()); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(after.Seconds()+0.999)))
			http.Error(w, "too many requests for this token; retry after the Retry-After seconds", http.StatusTooManyRequests)
			return
		}
		if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
			g.keepAlive(id.Tenant, sid)
		}
		next.ServeHTTP(w, r)
	})
}

func identityOf(ti *auth.TokenInfo) (Identity, bool) {
	if ti == nil {
		return Identity{}, false
	}
	id, ok := ti.Extra[identityKey].(Identity)
	return id, ok
}

// httpSessionRef is the session of a call over streamable HTTP: its MCP
// session, whose end (closed by the client, or idle) is watched from its
// first call on.
//
// With /mcp?session=NAME the call uses the tenant's named session NAME
// instead, the one POST /v1/jobs calls "session": its workspace outlives
// the MCP session (a client that reconnects for every call, such as the
// MCP Inspector CLI, stays in one workspace), and ends when idle for
// SessionIdleTTL or with DELETE /v1/sessions/NAME.
func (g *Gateway) httpSessionRef(req *mcp.CallToolRequest) (SessionRef, error) {
	id, ok := identityOf(req.Extra.TokenInfo)
	if !ok || req.Session == nil || req.Session.ID() == "" {
		return SessionRef{}, errors.New("gateway: this call has no authenticated MCP session; reconnect")
	}
	if name := req.Extra.Header.Get(namedSessionHeader); name != "" {
		return SessionRef{Tenant: id.Tenant, Kind: SessionHTTP, Name: name}, nil
	}
	ref := SessionRef{Tenant: id.Tenant, Kind: SessionMCP, Name: req.Session.ID()}
	g.watch(req.Session, ref, nil)
	return ref, nil
}

// watch ends ref's session when ss closes, once per session, then calls
// closed (if not nil).
func (g *Gateway) watch(ss *mcp.ServerSession, ref SessionRef, closed func()) {
	g.sess.mu.Lock()
	defer g.sess.mu.Unlock()
	if _, ok := g.sess.watched[ref.Name]; ok {
		if closed != nil {
			closed() // watched already (cannot happen: watched from its creation)
		}
		return
	}
	if g.sess.watched == nil {
		g.sess.watched = map[string]func(){}
	}
	g.sess.watched[ref.Name] = func() { _ = ss.Close() }
	g.sess.watchers.Go(func() {
		_ = ss.Wait()
		if closed != nil {
			closed()
		}
		g.endClosed(ref)
		g.sess.mu.Lock()
		delete(g.sess.watched, ref.Name)
		delete(g.sess.alive, ref.Name)
		g.sess.mu.Unlock()
	})
}

// endClosed ends the session of an MCP session that closed.
func (g *Gateway) endClosed(ref SessionRef) {
	ctx, cancel := context.WithTimeout(context.Background(), g.endTimeout())
	defer cancel()
	if err := g.end(ctx, ref); err != nil && !errors.Is(err, ErrNoSession) {
		g.log.Warn("end the workspace of a closed MCP session", "tenant", ref.Tenant, "session", ref.Name, "err", err)
	}
}

// CloseSessions closes every MCP session this gateway serves over HTTP
// and waits until their workspaces are ended, or ctx ends. Call it at
// shutdown, after the HTTP server stopped taking requests: an MCP session
// cannot outlive its gateway (the SDK keeps it in memory), so its
// workspace is garbage once the gateway is gone.
func (g *Gateway) CloseSessions(ctx context.Context) error {
	g.sess.mu.Lock()
	closers := make([]func(), 0, len(g.sess.watched))
	for _, c := range g.sess.watched {
		closers = append(closers, c)
	}
	g.sess.mu.Unlock()
	for _, c := range closers {
		go c() // Close waits for the session's calls in progress
	}
	done := make(chan struct{})
	go func() {
		g.sess.watchers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway: close MCP sessions: %w", ctx.Err())
	}
}

// ServeStdio serves MCP over stdin and stdout as id (`paddock mcp`) until
// the client disconnects or ctx ends; the whole process is one session,
// whose workspace is ended before ServeStdio returns.
func (g *Gateway) ServeStdio(ctx context.Context, id Identity) error {
	return g.serveMCP(ctx, id, &mcp.StdioTransport{})
}

// serveMCP serves one session of id over t, then ends its workspace.
func (g *Gateway) serveMCP(ctx context.Context, id Identity, t mcp.Transport) error {
	ref := SessionRef{Tenant: id.Tenant, Kind: SessionMCP, Name: "stdio-" + strings.ToLower(rand.Text())}
	srv := g.mcpServer(func(*mcp.CallToolRequest) (SessionRef, error) { return ref, nil })
	err := srv.Run(ctx, t)
	if errors.Is(err, context.Canceled) {
		err = nil // asked to stop
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.endTimeout())
	defer cancel()
	if eerr := g.end(ectx, ref); eerr != nil && !errors.Is(eerr, ErrNoSession) {
		err = errors.Join(err, eerr)
	}
	return err
}
