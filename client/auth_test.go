package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// tenantPermissions are exactly the NATS permissions of a tenant's
// credentials: nothing of the JetStream API but direct gets of its own
// results.
func tenantPermissions(tenant string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			job.SubmitSubject(tenant),
			job.CancelRequestSubject(tenant),
			"$JS.API.DIRECT.GET." + job.ResultsStream(tenant) + "." + job.ResultSubjects(tenant),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			job.InboxPrefix(tenant) + ".>",
			job.ResultSubjects(tenant),
			"paddock.output." + tenant + ".>",
		}},
	}
}

// authFleet is an embedded NATS server with users: "svc", allowed
// everything, plays the fleet (streams, results, cancel answers); each
// tenant user has tenantPermissions.
type authFleet struct {
	t   *testing.T
	srv *server.Server
	svc *nats.Conn
	js  jetstream.JetStream
}

func startAuthFleet(t *testing.T, tenants ...string) *authFleet {
	t.Helper()
	users := []*server.User{{Username: "svc", Password: "svc-secret"}}
	for _, tn := range tenants {
		users = append(users, &server.User{Username: tn, Password: "pw-" + tn, Permissions: tenantPermissions(tn)})
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true, Users: users})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	f := &authFleet{t: t, srv: srv}
	f.svc, err = nats.Connect(srv.ClientURL(), nats.UserInfo("svc", "svc-secret"))
	require.NoError(t, err)
	t.Cleanup(f.svc.Close)
	f.js, err = jetstream.New(f.svc)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, results.EnsureStreams(ctx, f.js, results.StreamConfig{}))
	for _, tn := range tenants {
		require.NoError(t, results.EnsureTenantStream(ctx, f.js, results.StreamConfig{}, tn, 0))
	}
	return f
}

// url is the server's URL with tenant's user and password in it.
func (f *authFleet) url(tenant string) string {
	return strings.Replace(f.srv.ClientURL(), "nats://", "nats://"+tenant+":pw-"+tenant+"@", 1)
}

// answerCancels answers every tenant's cancel requests as the schedulers
// do, with the tenant of the subject in the message.
func (f *authFleet) answerCancels() {
	f.t.Helper()
	sub, err := f.svc.QueueSubscribe(job.SubjectCancelRequests, job.QueueCancelers, func(m *nats.Msg) {
		tenant, _ := job.TenantFromCancelSubject(m.Subject)
		var req job.CancelRequest
		_ = json.Unmarshal(m.Data, &req)
		data, _ := json.Marshal(job.CancelReply{ID: req.ID, Outcome: job.CancelFlagged, Message: "flagged for " + tenant})
		_ = m.Respond(data)
	})
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(f.t, f.svc.Flush())
}

// asyncErrors records what the server reports to a connection
// asynchronously (permission violations, slow consumers).
type asyncErrors struct {
	mu   sync.Mutex
	errs []error
}

func (a *asyncErrors) handler() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		a.mu.Lock()
		a.errs = append(a.errs, err)
		a.mu.Unlock()
	})
}

func (a *asyncErrors) list() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// connectTenant connects as tenant's user (user and password in the URL)
// through client.Connect; as is the client's and the inbox's tenant.
func (f *authFleet) connectTenant(user, as string, errs *asyncErrors) *nats.Conn {
	f.t.Helper()
	nc, err := client.Connect(context.Background(), client.ConnectConfig{URL: f.url(user), Tenant: as,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Options: []nats.Option{errs.handler()}})
	require.NoError(f.t, err)
	f.t.Cleanup(nc.Close)
	return nc
}

// A client with exactly a tenant's permissions submits, reads, waits and
// cancels, and the server reports no violation.
func TestTenantPermissionsSuffice(t *testing.T) {
	t.Parallel()
	f := startAuthFleet(t, "ta", "tb")
	f.answerCancels()
	var errs asyncErrors
	nc := f.connectTenant("ta", "ta", &errs)
	c, err := client.New(nc, client.Config{Tenant: "ta"})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	sub, err := c.Submit(ctx, job.Spec{ID: "p-1", Command: "echo hi"})
	require.NoError(t, err)
	st, err := f.js.Stream(ctx, job.JobsStream("ta"))
	require.NoError(t, err)
	stored, err := st.GetMsg(ctx, sub.Seq)
	require.NoError(t, err)
	assert.Equal(t, job.SubmitSubject("ta"), stored.Subject)
	specs := make([]job.Spec, 50)
	for i := range specs {
		specs[i] = job.Spec{ID: fmt.Sprintf("batch-%02d", i), Command: "x"}
	}
	_, err = c.SubmitBatch(ctx, specs, nil)
	require.NoError(t, err)

	_, err = c.Get(ctx, "p-1")
	require.ErrorIs(t, err, client.ErrNotFinished)
	want := finishAs(t, f.js, "ta", "p-1", job.ReasonOK)
	got, err := c.Get(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = c.Wait(ctx, "p-1")
	require.NoError(t, err, "Wait of a finished job")
	assert.Equal(t, want, got)

	checkWaitAll(t, f, nc, c, ctx)

	reply, err := c.Cancel(ctx, "p-2")
	require.NoError(t, err)
	assert.Equal(t, job.CancelReply{ID: "p-2", Outcome: job.CancelFlagged, Message: "flagged for ta"}, reply)

	require.NoError(t, nc.FlushWithContext(ctx))
	assert.Empty(t, errs.list(), "the server reported no permission violation")
}

// checkWaitAll waits, as tenant ta, for ids half finished before and half
// after the call, and for a Wait that starts first.
func checkWaitAll(t *testing.T, f *authFleet, nc *nats.Conn, c *client.Client, ctx context.Context) {
	t.Helper()
	ids := make([]string, 200)
	want := map[string]job.Result{}
	for i := range ids {
		ids[i] = fmt.Sprintf("wa-%03d", i)
		if i%2 == 0 {
			want[ids[i]] = finishAs(t, f.js, "ta", ids[i], job.ReasonOK)
		}
	}
	type outcome struct {
		rs  []job.Result
		err error
	}
	all := make(chan outcome, 1)
	go func() {
		rs, err := c.WaitAll(ctx, ids, nil)
		all <- outcome{rs, err}
	}()
	one := make(chan outcome, 1)
	go func() {
		r, err := c.Wait(ctx, "late")
		one <- outcome{[]job.Result{r}, err}
	}()
	require.Eventually(t, func() bool { return subscriptions(t, f.srv, nc, job.ResultSubjects("ta")) == 2 }, wait, time.Millisecond)
	for i, id := range ids {
		if i%2 == 1 {
			want[id] = finishAs(t, f.js, "ta", id, job.ReasonExitNonzero)
		}
	}
	late := finishAs(t, f.js, "ta", "late", job.ReasonTimeout)
	o := <-all
	require.NoError(t, o.err)
	for i, id := range ids {
		assert.Equal(t, want[id], o.rs[i], id)
	}
	o = <-one
	require.NoError(t, o.err)
	assert.Equal(t, late, o.rs[0])
}

// A tenant's credentials cannot read or touch another tenant's jobs: the
// client reports the refusal at once, as a *PermissionError, instead of
// waiting for its deadline; and a tenant's own reads never show another
// tenant's result with the same id.
func TestTenantCannotReachAnotherTenant(t *testing.T) {
	t.Parallel()
	f := startAuthFleet(t, "ta", "tb")
	f.answerCancels()
	finishAs(t, f.js, "tb", "secret-job", job.ReasonOK)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	var errs asyncErrors
	own, err := client.New(f.connectTenant("ta", "ta", &errs), client.Config{Tenant: "ta"})
	require.NoError(t, err)
	defer own.Close()
	_, err = own.Get(ctx, "secret-job")
	require.ErrorIs(t, err, client.ErrNotFinished, "ta's secret-job is not tb's")

	// ta's credentials, tb's subjects (and ta's inbox, which the
	// credentials allow).
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	intruder, err := client.New(f.connectTenant("ta", "ta", &asyncErrors{}), client.Config{Tenant: "tb", Logger: quiet})
	require.NoError(t, err)
	defer intruder.Close()
	refused(t, "Get", func() error { _, err := intruder.Get(ctx, "secret-job"); return err })
	refused(t, "Wait", func() error { _, err := intruder.Wait(ctx, "secret-job"); return err })
	refused(t, "WaitAll", func() error { _, err := intruder.WaitAll(ctx, []string{"secret-job", "x"}, nil); return err })
	refused(t, "Cancel", func() error { _, err := intruder.Cancel(ctx, "secret-job"); return err })
	// A refused publish to JetStream shows only as a missing ack: Submit
	// explains its timeout.
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = intruder.Submit(short, job.Spec{ID: "sneak", Command: "x"})
	require.ErrorIs(t, err, client.ErrPermission)
	assert.Contains(t, err.Error(), job.SubmitSubject("tb"))

	// tb's own subjects, but a connection without tb's inbox prefix: the
	// replies' subscription is refused.
	tbNoInbox, err := client.New(f.connectTenant("tb", "", &asyncErrors{}), client.Config{Tenant: "tb", Logger: quiet})
	require.NoError(t, err)
	defer tbNoInbox.Close()
	refused(t, "Get without the inbox prefix", func() error { _, err := tbNoInbox.Get(ctx, "secret-job"); return err })
	short, cancelShort = context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = tbNoInbox.Submit(short, job.Spec{ID: "no-inbox", Command: "x"})
	require.ErrorIs(t, err, client.ErrPermission, "the ack's inbox is refused")
	assert.Empty(t, errs.list(), "the tenant's own client saw no violation")
}

// refused checks that op fails at once with a *PermissionError.
func refused(t *testing.T, name string, op func() error) {
	t.Helper()
	start := time.Now()
	err := op()
	require.ErrorIs(t, err, client.ErrPermission, name)
	require.ErrorIs(t, err, nats.ErrPermissionViolation, name)
	assert.Less(t, time.Since(start), 5*time.Second, "%s: refused at once, not at the deadline", name)
	var pe *client.PermissionError
	require.ErrorAs(t, err, &pe, name)
	assert.Contains(t, err.Error(), "NATS refused", name)
	assert.Contains(t, err.Error(), "credentials", name)
}
