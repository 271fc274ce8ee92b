package tenant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
	"github.com/paddockhq/paddock/tenant"
)

// fleet is an operator-mode server with the fleet's real streams and
// buckets for two tenants, alpha and beta, each in its own account.
type fleet struct {
	*setup
	js    jetstream.JetStream // admin, in PADDOCK
	alpha *conn
	beta  *conn
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	_, err = a.EnsureGatewayKey()
	require.NoError(t, err)
	s := startWith(t, a)
	f := &fleet{setup: s}
	_, f.js = s.admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, results.EnsureStreams(ctx, f.js, results.StreamConfig{}))
	for _, name := range []string{"alpha", "beta"} {
		require.NoError(t, results.EnsureTenantStream(ctx, f.js, results.StreamConfig{}, name, 0))
	}
	f.alpha, _ = s.tenantConn(t, "alpha")
	f.beta, _ = s.tenantConn(t, "beta")
	return f
}

// TestTenantAccountsWork: what a tenant is meant to do still works
// through its account's imports: submit (with the stream's ack), read its
// results live and by direct get, upload into its input bucket.
func TestTenantAccountsWork(t *testing.T) {
	f := newFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(f.alpha.Conn)
	require.NoError(t, err)
	ack, err := js.Publish(ctx, job.SubmitSubject("alpha"), []byte(`{"command":"echo hi"}`),
		jetstream.WithExpectStream(job.JobsStream("alpha")))
	require.NoError(t, err)
	require.Equal(t, job.JobsStream("alpha"), ack.Stream)

	sub, err := f.alpha.SubscribeSync(job.ResultSubjects("alpha"))
	require.NoError(t, err)
	require.NoError(t, f.alpha.Flush())
	_, err = f.js.Publish(ctx, job.ResultSubject("alpha", "j1"), []byte(`{"id":"j1"}`))
	require.NoError(t, err)
	m, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, `{"id":"j1"}`, string(m.Data))

	reply, err := f.alpha.Request("$JS.API.DIRECT.GET."+job.ResultsStream("alpha")+"."+job.ResultSubject("alpha", "j1"), nil, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, `{"id":"j1"}`, string(reply.Data))

	obs, err := js.ObjectStore(ctx, job.InBucket("alpha"))
	require.NoError(t, err)
	data := bytes.Repeat([]byte("x"), 300<<10)
	_, err = obs.PutBytes(ctx, "f", data)
	require.NoError(t, err)
	_, err = obs.PutBytes(ctx, "f", data[:10]) // an overwrite purges the old chunks
	require.NoError(t, err)
	st, err := f.js.Stream(ctx, "OBJ_"+job.InBucket("alpha"))
	require.NoError(t, err)
	require.EqualValues(t, 2, st.CachedInfo().State.Msgs, "one chunk and one meta after the overwrite")
}

// fleetState is what the fleet holds: per stream of PADDOCK, its messages,
// bytes, last sequence and consumers.
type fleetState map[string]string

func (f *fleet) state(t *testing.T) fleetState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := fleetState{}
	names := f.js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := f.js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		st[name] = fmt.Sprintf("msgs=%d bytes=%d last=%d consumers=%d",
			info.State.Msgs, info.State.Bytes, info.State.LastSeq, info.State.Consumers)
	}
	require.NoError(t, names.Err())
	return st
}

// requireUnchanged waits a moment for anything an attack set off inside
// the server (JetStream answers are queued) and fails if any stream but
// alpha's own changed.
func (f *fleet) requireUnchanged(t *testing.T, before fleetState, what string) {
	t.Helper()
	own := []string{job.JobsStream("alpha"), "OBJ_" + job.InBucket("alpha")}
	diff := func() []string {
		after := f.state(t)
		var changed []string
		for _, name := range slices.Sorted(maps.Keys(after)) {
			if !slices.Contains(own, name) && after[name] != before[name] {
				changed = append(changed, fmt.Sprintf("%s: %s -> %s", name, before[name], after[name]))
			}
		}
		return changed
	}
	// Polled here, not with require.Never: Never runs its condition in a
	// goroutine that can outlive it, and that one's look at the streams
	// then fails on the connection the test's cleanup closed.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if changed := diff(); len(changed) > 0 {
			t.Fatalf("%s changed the fleet's streams: %v", what, changed)
		}
		// sleep: the window in which an answer JetStream queued for an
		// attack would land; nothing signals "no write happened".
		time.Sleep(50 * time.Millisecond)
	}
}

// attack is one thing a hostile tenant sends: a subject, a reply subject
// and a body.
type attack struct {
	name, subject, reply string
	body                 []byte
}

// targets are subjects of other tenants' and of the fleet's streams and
// buckets that an attack tries to make the server (or a service) publish
// on.
func targets() []string {
	return []string{
		job.SubmitSubject("beta"),
		job.ResultSubject("beta", "forged"),
		job.ResultSubject("alpha", "forged"), // a result only the fleet may write
		job.OutputSubject("beta", "j1"),
		"$O." + job.InBucket("beta") + ".C.x", "$O." + job.OutBucket("beta") + ".C.x",
		"$O." + job.OutBucket("alpha") + ".C.x",
		"$KV." + tenant.RegistryBucket + ".beta", "$KV." + tenant.TokensBucket + ".x",
	}
}

// attacks are every way found for a tenant to make the server write: a
// push consumer delivering to a target, streams that capture, source,
// mirror or republish a target, KV and Object Store writes, and every
// request a tenant may make with a target as its reply subject (the
// server, or a service answering, publishes its answer there).
func attacks(t *testing.T) []attack {
	consumer := func(stream string, deliver string) []byte {
		b, err := json.Marshal(map[string]any{"stream_name": stream, "config": map[string]any{
			"deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none"}})
		require.NoError(t, err)
		return b
	}
	stream := func(cfg map[string]any) []byte {
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		return b
	}
	var as []attack
	for i, target := range targets() {
		out := job.OutputStream("alpha")
		as = append(as,
			attack{"push consumer on own output", "$JS.API.CONSUMER.CREATE." + out, "", consumer(out, target)},
			attack{"push consumer, mapped name", tenant.LocalAPIPrefix + "CONSUMER.CREATE." + out, "", consumer(out, target)},
			attack{"push consumer on own results", "$JS.API.CONSUMER.CREATE." + job.ResultsStream("alpha"), "", consumer(job.ResultsStream("alpha"), target)},
			attack{"stream capturing the target", "$JS.API.STREAM.CREATE.X" + fmt.Sprint(i), "",
				stream(map[string]any{"name": "X" + fmt.Sprint(i), "subjects": []string{target}})},
			attack{"stream republishing to the target", tenant.LocalAPIPrefix + "STREAM.CREATE.R" + fmt.Sprint(i), "",
				stream(map[string]any{"name": "R" + fmt.Sprint(i), "subjects": []string{"alpha.x"},
					"republish": map[string]any{"src": ">", "dest": target}})},
			attack{"stream sourcing beta's", "$JS.API.STREAM.CREATE.S" + fmt.Sprint(i), "",
				stream(map[string]any{"name": "S" + fmt.Sprint(i), "sources": []map[string]any{{"name": job.JobsStream("beta")}}})},
			attack{"write to the target", target, "", []byte("forged")},
		)
		for _, req := range tenantRequestsOf("alpha") {
			as = append(as, attack{"reply to the target", req, target, []byte(`{"seq":1}`)})
		}
		for _, sys := range []string{"$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.SERVER.PING", "$SYS.REQ.USER.INFO", "$JS.API.INFO"} {
			as = append(as, attack{"system request replying to the target", sys, target, nil})
		}
	}
	return as
}

// tenantRequestsOf are the subjects tenant t may publish on, with a
// concrete subject where the grant has a wildcard.
func tenantRequestsOf(t string) []string {
	g, _ := tenant.GrantOf(tenant.RoleTenant, t)
	var out []string
	for _, s := range g.Pub {
		out = append(out, strings.ReplaceAll(s, ">", "x"))
	}
	return out
}

// The wall of issue 25: with its own valid credentials, a tenant tries
// every API found that makes the server publish for it, aimed at other
// tenants' and the fleet's streams and buckets, and nothing lands
// anywhere but in its own.
func TestTenantCannotMakeTheServerWriteElsewhere(t *testing.T) {
	f := newFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Something in every stream, so that a consumer has messages to deliver
	// and a direct get something to answer.
	for _, subj := range []string{job.OutputSubject("alpha", "j1"), job.ResultSubject("alpha", "j1"), job.ResultSubject("beta", "j1")} {
		_, err := f.js.Publish(ctx, subj, []byte(`{"id":"j1"}`))
		require.NoError(t, err)
	}
	// The fleet's services answer the tenants' requests, as the scheduler
	// does, with its grant: to whatever reply subject the request carries.
	schedPath, _ := f.issue(t, tenant.RoleScheduler, "")
	sched := mustDial(t, f.url, schedPath)
	answered := make(chan string, 1024)
	for _, subj := range []string{job.CancelRequestSubject("*"), job.JobsRequestSubject("*")} {
		_, err := sched.Subscribe(subj, func(m *nats.Msg) {
			answered <- m.Reply
			_ = m.Respond([]byte(`{"answer":true}`))
		})
		require.NoError(t, err)
	}
	require.NoError(t, sched.Flush())

	before := f.state(t)
	for _, a := range attacks(t) {
		msg := &nats.Msg{Subject: a.subject, Reply: a.reply, Data: a.body}
		require.NoError(t, f.alpha.PublishMsg(msg), a.name)
	}
	require.NoError(t, f.alpha.Flush())
	f.requireUnchanged(t, before, "alpha's attacks")
	require.NotEmpty(t, answered, "the service answered alpha's requests")
	for len(answered) > 0 {
		assert.True(t, strings.HasPrefix(<-answered, tenant.ServiceReplyPrefix), "the service saw the import's reply subject, not alpha's")
	}
	select {
	case err := <-sched.errs:
		t.Fatalf("the service could not answer: %v", err)
	default:
	}

	// beta is not locked out or slowed: it still submits and reads.
	js, err := jetstream.New(f.beta.Conn)
	require.NoError(t, err)
	_, err = js.Publish(ctx, job.SubmitSubject("beta"), []byte(`{"command":"true"}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), streamMsgs(t, f.js, job.JobsStream("beta")), "only beta's own submission")
}

// The control: the same attacks by a user in the fleet's own account with
// the grant tenants had before they had accounts (subject permissions
// only, consumers on their own output stream allowed) do land in beta's
// stream. What stops them above is the account wall, not the attacks
// being harmless.
func TestSubjectPermissionsAloneDoNotStopTheAttacks(t *testing.T) {
	f := newFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := f.js.Publish(ctx, job.OutputSubject("alpha", "j1"), []byte("chunk"))
	require.NoError(t, err)
	_, err = f.js.Publish(ctx, job.ResultSubject("alpha", "j1"), []byte(`{"id":"j1"}`))
	require.NoError(t, err)
	legacy := f.legacyTenantUser(t, "alpha")
	out := job.OutputStream("alpha")
	body, err := json.Marshal(map[string]any{"stream_name": out, "config": map[string]any{
		"deliver_subject": job.SubmitSubject("beta"), "deliver_policy": "all", "ack_policy": "none"}})
	require.NoError(t, err)
	require.NoError(t, legacy.PublishMsg(&nats.Msg{Subject: "$JS.API.CONSUMER.CREATE." + out, Data: body}))
	require.NoError(t, legacy.PublishMsg(&nats.Msg{
		Subject: "$JS.API.DIRECT.GET." + job.ResultsStream("alpha") + "." + job.ResultSubject("alpha", "j1"),
		Reply:   job.SubmitSubject("beta")}))
	require.NoError(t, legacy.Flush())
	require.Eventually(t, func() bool { return streamMsgs(t, f.js, job.JobsStream("beta")) >= 2 }, 10*time.Second, 20*time.Millisecond,
		"in one account, a push consumer's deliver subject and a request's reply subject reach beta's stream")
}

// legacyTenantUser is a user of tenant t as before tenant accounts: in
// PADDOCK, with t's subject permissions and consumers on its own output
// stream.
func (f *fleet) legacyTenantUser(t *testing.T, name string) *conn {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, f.auth.Save(dir))
	perms, err := tenant.Permissions(tenant.RoleTenant, name)
	require.NoError(t, err)
	perms.Pub.Allow.Add("$JS.API.CONSUMER.CREATE." + job.OutputStream(name))
	creds := testsvc.LegacyTenantCreds(t, dir, name, perms)
	return mustDial(t, f.url, writeCreds(t, creds), nats.CustomInboxPrefix(job.InboxPrefix(name)))
}
