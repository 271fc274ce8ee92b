package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/gateway"
	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/scheduler"
	"github.com/paddockhq/paddock/worker"
)

// The operator's fleet page in a real headless Chromium, over a gateway
// whose operator view reads a real Redis with a worker's heartbeat: the
// operator logs in with the operator token and sees the host, the
// worker's concurrency and pool, and Redis's role, with only the operator
// link in the nav; a tenant who logs in has no operator link, and at
// #/operator the page says the API refused it (403), with no host shown.
func TestOperatorPageInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	ctx := context.Background()
	rdb := testsvc.StartRedis(t).Client()
	t.Cleanup(func() { rdb.Close() })
	hb := worker.NewHeartbeat(rdb, "w-browser", "paddock:", 30*time.Second)
	hb.Status = func(b *job.WorkerBeat) { b.Concurrency, b.Pool = 7, 3 }
	require.NoError(t, hb.Start(ctx))
	t.Cleanup(hb.Stop)
	view, err := scheduler.NewOperatorView(rdb, scheduler.OperatorViewConfig{})
	require.NoError(t, err)
	pool := gateway.NewPool(func(ctx context.Context, tenant string) (*nats.Conn, error) {
		return nil, fmt.Errorf("no NATS in this test")
	}, client.Config{})
	t.Cleanup(pool.Close)
	opToken := strings.Repeat("o", 40)
	gw, err := gateway.New(gateway.Config{Clients: pool, Sessions: gateway.NewMemSessions(), InsecureCookies: true,
		Logger: slog.New(slog.DiscardHandler), OperatorToken: opToken,
		OperatorFleet: func(ctx context.Context) (any, error) { return view.Read(ctx) },
		Auth: gateway.AuthFunc(func(_ context.Context, bearer string) (gateway.Identity, error) {
			if bearer == "pdk_dev" {
				return gateway.Identity{Tenant: "dev", TokenID: "dev-id"}, nil
			}
			return gateway.Identity{}, gateway.ErrUnauthorized
		})})
	require.NoError(t, err)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	host, _ := os.Hostname()

	b := newBrowser(t, chromium)
	login := func(token string) {
		b.run(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("login-token")),
			chromedp.SendKeys(chromedp.ID("login-token"), token), chromedp.Click(chromedp.ID("login-submit")))
	}
	login(opToken)
	b.waitText("#hosts", host, time.Minute)
	assert.Contains(t, b.text("#hosts"), "7", "the host's concurrency")
	assert.Contains(t, b.text("#op-workers"), "w-browser")
	assert.Contains(t, b.text("#redis"), "master")
	assert.Equal(t, "operator", b.text("#who"))
	assert.Equal(t, 1, eval[int](b, `[...document.querySelectorAll('#nav a')].filter((a) => !a.hidden).length`), "only the operator's link")
	b.shot("operator.png")
	b.run(chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("login-token")))

	login("pdk_dev")
	b.run(chromedp.WaitVisible(chromedp.ID("who")))
	b.waitText("#who", "tenant dev", 30*time.Second)
	assert.Zero(t, eval[int](b, `[...document.querySelectorAll('#nav a')].filter((a) => !a.hidden && a.dataset.page === 'operator').length`))
	b.hash("#/operator")
	b.waitText("#status", "operator token", 30*time.Second)
	assert.NotContains(t, b.pageText(), host, "a tenant sees no host")
	saw403 := false
	for _, e := range b.errors() {
		// The 403 the tenant provoked, and the jobs page's 503s (this
		// gateway has no NATS), are the only errors the browser may log.
		noNATS := strings.Contains(e, "503") && (strings.Contains(e, "/v1/jobs") || strings.Contains(e, "/v1/events"))
		saw403 = saw403 || strings.Contains(e, "403")
		assert.True(t, noNATS || strings.Contains(e, "403 (Forbidden) "+srv.URL+"/v1/operator/fleet"), "browser error: %s", e)
	}
	assert.True(t, saw403, "the operator page's request was refused")
}
