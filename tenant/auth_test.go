package tenant_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/tenant"
)

func TestConnectionsWithoutValidCredentialsAreRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	good, _, err := s.auth.IssueUser(tenant.RoleTenant, "alpha", "")
	require.NoError(t, err)

	_, err = dial(t, s.url, "")
	requireAuthViolation(t, err, "no credentials")

	other, err := tenant.NewAuthority()
	require.NoError(t, err)
	foreign, _, err := other.IssueUser(tenant.RoleAdmin, "", "")
	require.NoError(t, err)
	_, err = dial(t, s.url, writeCreds(t, foreign))
	requireAuthViolation(t, err, "creds signed by another authority")

	// The JWT of one user with the seed of another: the nonce signature fails.
	stranger, _, err := s.auth.IssueUser(tenant.RoleTenant, "alpha", "")
	require.NoError(t, err)
	mixed := jwtPart(t, good) + seedPart(t, stranger)
	_, err = dial(t, s.url, writeCreds(t, []byte(mixed)))
	requireAuthViolation(t, err, "seed of another user")

	// A JWT whose claims were edited (admin permissions) keeps its old
	// signature: the server refuses it.
	_, err = dial(t, s.url, writeCreds(t, []byte(tamper(t, good))))
	requireAuthViolation(t, err, "tampered JWT")

	// A file that is no creds at all fails before the server is asked.
	_, err = dial(t, s.url, writeCreds(t, []byte("not a creds file\n")))
	require.Error(t, err)

	c := mustDial(t, s.url, writeCreds(t, good), nats.CustomInboxPrefix("_INBOX.alpha"))
	assert.True(t, c.IsConnected(), "the genuine creds connect")
}

// jwtPart and seedPart cut a creds file in its JWT and seed sections.
func jwtPart(t *testing.T, creds []byte) string {
	i := strings.Index(string(creds), "************************* IMPORTANT")
	require.Positive(t, i)
	return string(creds[:i])
}

func seedPart(t *testing.T, creds []byte) string {
	i := strings.Index(string(creds), "************************* IMPORTANT")
	require.Positive(t, i)
	return string(creds[i:])
}

// tamper edits the claims of the user JWT in creds to allow publishing
// everywhere, keeping the account's signature of the original claims.
func tamper(t *testing.T, creds []byte) string {
	token, err := jwt.ParseDecoratedJWT(creds)
	require.NoError(t, err)
	parts := strings.Split(token, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims map[string]any
	require.NoError(t, json.Unmarshal(raw, &claims))
	claims["nats"].(map[string]any)["pub"] = map[string]any{"allow": []string{">"}}
	raw, err = json.Marshal(claims)
	require.NoError(t, err)
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(raw) + "." + parts[2]
	return strings.Replace(string(creds), token, forged, 1)
}

// tenantStreams creates, as admin, the submission and results streams of
// alpha and beta (direct get allowed).
func tenantStreams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta"} {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: job.JobsStream(name), Subjects: []string{job.SubmitSubject(name)}})
		require.NoError(t, err)
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: job.ResultsStream(name),
			Subjects: []string{job.ResultSubjects(name)}, AllowDirect: true})
		require.NoError(t, err)
	}
}

func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

func TestTenantSubmitsOnlyAsItself(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, adminJS := s.admin(t)
	tenantStreams(t, adminJS)
	alpha, _ := s.tenantConn(t, "alpha")
	js, err := jetstream.New(alpha.Conn)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	ack, err := js.Publish(ctx, job.SubmitSubject("alpha"), []byte(`{"id":"j1"}`))
	require.NoError(t, err, "alpha submits as alpha")
	assert.Equal(t, job.JobsStream("alpha"), ack.Stream)
	assert.Equal(t, uint64(1), ack.Sequence)

	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	_, err = js.Publish(short, job.SubmitSubject("beta"), []byte(`{"id":"j1"}`))
	assert.Error(t, err, "no ack for a submission as beta")
	perr := alpha.waitErr(t, `Publish to "paddock.jobs.submit.beta"`)
	assert.ErrorIs(t, perr, nats.ErrPermissionViolation)
	assert.Zero(t, streamMsgs(t, adminJS, job.JobsStream("beta")), "nothing reached beta's stream")
	assert.Equal(t, uint64(1), streamMsgs(t, adminJS, job.JobsStream("alpha")))

	// Nor may a tenant forge a result, even its own.
	require.NoError(t, alpha.Publish(job.SubjectResultPrefix+"alpha.j1", []byte("forged")))
	alpha.waitErr(t, `Publish to "paddock.results.alpha.j1"`)
	assert.Zero(t, streamMsgs(t, adminJS, job.ResultsStream("alpha")))
}

// directGet asks the results stream of subject's tenant for the last
// message on subject.
func directGet(nc *nats.Conn, subject string) (*nats.Msg, error) {
	tenant, _, _ := job.ParseResultSubject(subject)
	return nc.Request("$JS.API.DIRECT.GET."+job.ResultsStream(tenant)+"."+subject, nil, time.Second)
}

func TestTenantReadsOnlyItsOwnResults(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	admin, adminJS := s.admin(t)
	tenantStreams(t, adminJS)
	ctx := context.Background()
	for _, name := range []string{"alpha", "beta"} {
		_, err := adminJS.Publish(ctx, job.SubjectResultPrefix+name+".j1", []byte("result of "+name))
		require.NoError(t, err)
	}
	alpha, _ := s.tenantConn(t, "alpha")

	m, err := directGet(alpha.Conn, job.SubjectResultPrefix+"alpha.j1")
	require.NoError(t, err, "alpha gets its own last result")
	assert.Equal(t, "result of alpha", string(m.Data))
	assert.Equal(t, job.SubjectResultPrefix+"alpha.j1", m.Header.Get("Nats-Subject"))

	_, err = directGet(alpha.Conn, job.SubjectResultPrefix+"beta.j1")
	assert.Error(t, err, "no direct get of beta's result")
	alpha.waitErr(t, `Publish to "$JS.API.DIRECT.GET.PADDOCK_RESULTS_beta.paddock.results.beta.j1"`)

	// Live results: alpha's subscription to beta's is refused. The server
	// delivers to one connection in order, so once alpha's own result
	// arrives, beta's would have arrived before it.
	theirs, err := alpha.SubscribeSync(job.ResultSubjects("beta"))
	require.NoError(t, err)
	alpha.waitErr(t, `Subscription to "paddock.results.beta.>"`)
	mine, err := alpha.SubscribeSync(job.ResultSubjects("alpha"))
	require.NoError(t, err)
	require.NoError(t, alpha.Flush())
	require.NoError(t, admin.Publish(job.SubjectResultPrefix+"beta.j2", []byte("b")))
	require.NoError(t, admin.Publish(job.SubjectResultPrefix+"alpha.j2", []byte("a")))
	got, err := mine.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "a", string(got.Data))
	n, _, _ := theirs.Pending()
	assert.Zero(t, n, "beta's result did not reach alpha")
}

func TestTenantInboxes(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	admin, _ := s.admin(t)
	_, err := admin.Subscribe(job.CancelRequestSubject("alpha"), func(m *nats.Msg) { _ = m.Respond([]byte("ok " + m.Reply)) })
	require.NoError(t, err)
	require.NoError(t, admin.Flush())
	alpha, _ := s.tenantConn(t, "alpha")

	m, err := alpha.Request(job.CancelRequestSubject("alpha"), []byte("j1"), 5*time.Second)
	require.NoError(t, err, "a request with the _INBOX.alpha prefix gets its reply")
	// The import rewrote the reply subject: the service in PADDOCK never
	// learns, nor can it publish on, a subject alpha chose.
	assert.True(t, strings.HasPrefix(string(m.Data), "ok _R_."), string(m.Data))

	theirs, err := alpha.SubscribeSync("_INBOX.beta.>")
	require.NoError(t, err)
	alpha.waitErr(t, `Subscription to "_INBOX.beta.>"`)
	mine, err := alpha.SubscribeSync("_INBOX.alpha.probe")
	require.NoError(t, err)
	require.NoError(t, alpha.Flush())
	// Inboxes are in the tenant's own account: not even the fleet's
	// account reaches them but through a reply.
	require.NoError(t, admin.Publish("_INBOX.beta.x", []byte("b")))
	require.NoError(t, admin.Publish("_INBOX.alpha.probe", []byte("a")))
	require.NoError(t, admin.Flush())
	require.NoError(t, alpha.Flush())
	n, _, _ := theirs.Pending()
	assert.Zero(t, n, "beta's inbox did not reach alpha")
	n, _, _ = mine.Pending()
	assert.Zero(t, n, "PADDOCK's publish on alpha's inbox subject stays in PADDOCK")

	// Without its prefix a tenant's requests go unanswered: it may not
	// subscribe to the default _INBOX.<random> subjects.
	plainPath, _ := s.issue(t, tenant.RoleTenant, "alpha")
	plain := mustDial(t, s.url, plainPath)
	_, err = plain.Request(job.CancelRequestSubject("alpha"), nil, 500*time.Millisecond)
	assert.Error(t, err)
	plain.waitErr(t, `Subscription to "_INBOX.`)
}

func TestRevokedTenantIsDisconnectedAndRefused(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	alphaPath, alphaPub := s.issue(t, tenant.RoleTenant, "alpha")
	alpha := mustDial(t, s.url, alphaPath, nats.CustomInboxPrefix("_INBOX.alpha"))
	beta, _ := s.tenantConn(t, "beta")
	sysCreds, _, err := s.auth.IssueSystemUser()
	require.NoError(t, err)
	sys := mustDial(t, s.url, writeCreds(t, sysCreds))

	require.NoError(t, s.auth.RevokeTenantUser("alpha", alphaPub))
	assert.True(t, s.auth.Revoked(alphaPub))
	require.NoError(t, s.auth.PushAccount(context.Background(), sys.Conn))

	select {
	case <-alpha.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked user's live connection was not closed")
	}
	assert.ErrorIs(t, alpha.waitErr(t, "authentication revoked"), nats.ErrAuthRevoked)
	_, err = dial(t, s.url, alphaPath)
	requireAuthViolation(t, err, "a revoked user connects no more")

	require.NoError(t, beta.Flush(), "another tenant is untouched")
	assert.True(t, beta.IsConnected())
	again, _ := s.tenantConn(t, "alpha")
	assert.True(t, again.IsConnected(), "a new user of the same tenant connects")
}

func TestPushAccountNeedsTheSystemAccount(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	admin, _ := s.admin(t)
	err := s.auth.PushAccount(context.Background(), admin.Conn)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "system-account user")

}

func TestServicePermissions(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	_, adminJS := s.admin(t)
	tenantStreams(t, adminJS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	alpha, _ := s.tenantConn(t, "alpha")
	ajs, err := jetstream.New(alpha.Conn)
	require.NoError(t, err)
	_, err = ajs.Publish(ctx, job.SubmitSubject("alpha"), []byte("spec"))
	require.NoError(t, err)

	// The scheduler consumes a tenant's stream and acks.
	schedPath, _ := s.issue(t, tenant.RoleScheduler, "")
	sched := mustDial(t, s.url, schedPath)
	sjs, err := jetstream.New(sched.Conn)
	require.NoError(t, err)
	cons, err := sjs.CreateOrUpdateConsumer(ctx, job.JobsStream("alpha"), jetstream.ConsumerConfig{Durable: job.ConsumerSchedulers})
	require.NoError(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	assert.Equal(t, "spec", string(msg.Data()))
	require.NoError(t, msg.DoubleAck(ctx))

	// The worker publishes a result and hears cancels, but cannot submit.
	workPath, _ := s.issue(t, tenant.RoleWorker, "")
	work := mustDial(t, s.url, workPath)
	wjs, err := jetstream.New(work.Conn)
	require.NoError(t, err)
	_, err = wjs.Publish(ctx, job.SubjectResultPrefix+"alpha.j1", []byte("result"))
	require.NoError(t, err)
	cancels, err := work.SubscribeSync(job.SubjectCancelPrefix + ">")
	require.NoError(t, err)
	require.NoError(t, work.Flush())
	require.NoError(t, sched.Publish(job.CancelSubject("alpha/j1"), nil))
	_, err = cancels.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.NoError(t, work.Publish(job.SubmitSubject("alpha"), []byte("x")))
	work.waitErr(t, `Publish to "paddock.jobs.submit.alpha"`)
}

func TestServerConfigForAStandaloneServer(t *testing.T) {
	t.Parallel()
	a, err := tenant.NewAuthority()
	require.NoError(t, err)
	dir := t.TempDir()
	text, err := a.ServerConfig(dir + "/accounts")
	require.NoError(t, err)
	require.NoError(t, a.Save(dir+"/auth"))
	for _, seed := range []string{"operator.nk", "sys.nk", "account.nk"} {
		b, err := os.ReadFile(dir + "/auth/" + seed)
		require.NoError(t, err)
		assert.NotContains(t, text, strings.TrimSpace(string(b)), "no seed in the config")
	}
	conf := dir + "/nats-server.conf"
	require.NoError(t, os.WriteFile(conf, []byte(text+"\njetstream { store_dir: \""+dir+"/js\" }\n"), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	s := startServer(t, a, opts, dir)

	_, err = dial(t, s.url, "")
	requireAuthViolation(t, err)
	alpha, _ := s.tenantConn(t, "alpha")
	_, adminJS := s.admin(t)
	tenantStreams(t, adminJS)
	js, err := jetstream.New(alpha.Conn)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), job.SubmitSubject("alpha"), []byte("spec"))
	require.NoError(t, err)

	_, err = a.ServerConfig("relative/dir")
	assert.Error(t, err)
	_, err = a.ServerConfig("/tmp/a\"b")
	assert.Error(t, err)
}
