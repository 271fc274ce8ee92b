package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A request the NATS server's permissions refuse gets no reply and no
// "no responders": the server drops it and sends the connection an
// asynchronous -ERR, which nats.go hands to the error handler and keeps as
// the connection's LastError. A plain nc.Request would wait for its
// deadline. Client.request flushes between the publish and the wait
// instead: the server writes the -ERR of a refused publish before the PONG
// of a later PING, and nats.go reads it before the PONG, so once the flush
// returns a refusal is known and fails at once as a *PermissionError.

// replyMux routes the replies of the client's requests: one subscription on
// <inbox>.* for all of them, as nats.go's own requests do, and one token per
// request. It opens on the first request.
type replyMux struct {
	mu      sync.Mutex
	sub     *nats.Subscription
	prefix  string // "<inbox>."
	next    uint64
	waiting map[string]chan *nats.Msg
}

// openReply returns a new reply subject and the channel its reply arrives
// on. The first call subscribes, and checks that the server took the
// subscription: a refused inbox would leave every request waiting for its
// deadline.
func (c *Client) openReply(ctx context.Context) (string, chan *nats.Msg, error) {
	m := &c.replies
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub == nil {
		prefix := c.nc.NewInbox() + "."
		before := c.nc.LastError()
		sub, err := c.nc.Subscribe(prefix+"*", m.deliver)
		if err != nil {
			return "", nil, err
		}
		_ = c.nc.FlushWithContext(ctx) // see request
		if err := c.denied(before, prefix+"*", prefix); err != nil {
			_ = sub.Unsubscribe()
			return "", nil, err
		}
		m.sub, m.prefix, m.waiting = sub, prefix, map[string]chan *nats.Msg{}
	}
	m.next++
	token := strconv.FormatUint(m.next, 36)
	ch := make(chan *nats.Msg, 1)
	m.waiting[token] = ch
	return m.prefix + token, ch, nil
}

// done forgets a reply subject whose request has ended.
func (m *replyMux) done(subject string) {
	m.mu.Lock()
	delete(m.waiting, strings.TrimPrefix(subject, m.prefix))
	m.mu.Unlock()
}

// deliver hands a reply to its request: once (a second reply is dropped).
func (m *replyMux) deliver(msg *nats.Msg) {
	m.mu.Lock()
	token := strings.TrimPrefix(msg.Subject, m.prefix)
	ch := m.waiting[token]
	delete(m.waiting, token)
	m.mu.Unlock()
	if ch != nil {
		ch <- msg // buffered: never blocks
	}
}

func (m *replyMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sub != nil {
		_ = m.sub.Unsubscribe()
		m.sub = nil
	}
}

// request sends msg as a request and returns its reply. scope is the
// subject prefix whose refusal by the server's permissions is this
// request's (the subject itself, or the prefix a tenant's grant has). A
// status-only 503 reply is nats.ErrNoResponders. ctx must have a deadline.
func (c *Client) request(ctx context.Context, msg *nats.Msg, scope string) (*nats.Msg, error) {
	reply, ch, err := c.openReply(ctx)
	if err != nil {
		return nil, err
	}
	defer c.replies.done(reply)
	msg.Reply = reply
	before := c.nc.LastError()
	if err := c.nc.PublishMsg(msg); err != nil {
		return nil, err
	}
	// A failed flush (the connection is reconnecting: the request waits in
	// nats.go's reconnect buffer) proves nothing; the reply may still come.
	_ = c.nc.FlushWithContext(ctx)
	if perr := c.denied(before, msg.Subject, scope); perr != nil {
		return nil, perr
	}
	select {
	case m := <-ch:
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return m, nil
	case <-ctx.Done():
		if perr := c.denied(before, msg.Subject, scope); perr != nil {
			return nil, perr
		}
		return nil, ctx.Err()
	}
}

// denied returns a *PermissionError when the connection's last error is a
// permission violation on a subject under scope, reported since before was
// read.
func (c *Client) denied(before error, subject, scope string) error {
	err := c.violation(scope)
	if err == nil || sameError(err, before) {
		return nil
	}
	return &PermissionError{Tenant: c.tenant, Subject: subject, Err: err}
}

// deniedAny is denied without the "since", for an operation that already
// failed (a JetStream publish that timed out): whether the last violation,
// on subject or on the connection's inbox (nats.go's own reply
// subscription), explains it.
func (c *Client) deniedAny(subject string) error {
	inbox := c.nc.Opts.InboxPrefix
	inbox = cmp.Or(inbox, nats.InboxPrefix)
	if err := c.violation(subject, inbox); err != nil {
		return &PermissionError{Tenant: c.tenant, Subject: subject, Err: err}
	}
	return nil
}

// violation returns the connection's last error when it is a permission
// violation naming a subject under one of scopes (the server quotes the
// subject it refused).
func (c *Client) violation(scopes ...string) error {
	err := c.nc.LastError()
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	text := err.Error()
	for _, scope := range scopes {
		if strings.Contains(text, `"`+scope) {
			return err
		}
	}
	return nil
}

// sameError reports whether a and b are the same error value (nats.go makes
// a new one for every -ERR), without panicking on an incomparable type.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	t := reflect.TypeOf(a)
	return t == reflect.TypeOf(b) && t.Comparable() && a == b
}

// withTimeout applies PublishTimeout to a ctx without a deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.PublishTimeout)
}

// askService sends data as a request on subject to a service the
// schedulers answer (cancel, the job list) and returns the reply's body. A
// scheduler restarting, or NATS reconnecting, answers "no responders" for
// a moment: askService retries that every 200 ms until ctx ends, then
// returns noService. A permission refusal is returned as it is; any other
// failure is wrapped with what, as "client: <what>: …". ctx must have a
// deadline.
func (c *Client) askService(ctx context.Context, subject string, data []byte, what string, noService error) ([]byte, error) {
	for {
		msg, err := c.request(ctx, &nats.Msg{Subject: subject, Data: data}, subject)
		switch {
		case err == nil:
			return msg.Data, nil
		case errors.Is(err, nats.ErrNoResponders):
			select {
			case <-ctx.Done():
				return nil, noService
			case <-time.After(200 * time.Millisecond):
			}
		case errors.Is(err, ErrPermission):
			return nil, err
		default:
			return nil, fmt.Errorf("client: %s: %w", what, err)
		}
	}
}
