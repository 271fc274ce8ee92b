package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// The dashboard in a real headless Chromium against a real `paddock up`:
// log in with the dev tenant's token; a job submitted through the API
// (the SDK's, for its delay) appears in the jobs table and goes queued →
// running → succeeded without a reload; its page shows the output and a waterfall with the submit and
// attempt spans; output that is HTML renders as text; a running job is
// canceled from its page; another tenant's job is nowhere; any console
// error, uncaught exception or dialog fails the test. With
// PADDOCK_UI_SHOTS=dir (make ui-test) it saves jobs.png, job.png and
// fleet.png there.
func TestDashboardInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := startUp(t)
	m := gatewayURLRE.FindStringSubmatch(s.stderr.String())
	require.NotNil(t, m, "paddock up did not say where its gateway is:\n%s", s.stderr)
	base := m[1]
	dev := &uiAPI{t: t, base: base, token: readDevToken(t, s.dir)}

	// Another tenant and a job of its own, which dev must never see.
	s.addTenant(t, "beta")
	code, out, _ := s.cli(t, "tenant", "token", "beta")
	require.Equal(t, exitOK, code, out)
	beta := &uiAPI{t: t, base: base, token: strings.TrimSpace(out)}
	beta.submit("ui-beta-only", "echo beta")
	beta.wait("ui-beta-only")
	require.Contains(t, beta.get("/v1/jobs"), `"ui-beta-only"`, "beta lists its own job")

	b := newBrowser(t, chromium)
	b.diag = func() string {
		_, list := dev.do(http.MethodGet, "/v1/jobs", nil)
		log := s.stderr.String()
		return "GET /v1/jobs: " + list + "\npaddock up (tail):\n" + log[max(0, len(log)-6000):]
	}
	b.run(chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("login-token")),
		chromedp.SendKeys(chromedp.ID("login-token"), dev.token),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("jobs")))
	eval[int](b, `window.paddockNoReload = 1`)

	// The watched job is delayed by 3 s (paddock submit --in, the SDK's
	// NotBefore: the HTTP API has no delay), so that it sits queued long
	// enough to be seen queued.
	code, out, _ = s.cli(t, "submit", "--id", "ui-watch", "--in", "3s", "--", "sleep 2; echo done")
	require.Equal(t, exitOK, code, out)
	states := b.watchStates("ui-watch", "succeeded", 2*time.Minute)
	assert.Equal(t, []string{"queued", "running", "succeeded"}, states, "the row's states, live")
	assert.Equal(t, 1, eval[int](b, `window.paddockNoReload || 0`), "the page was never reloaded")
	dev.submit("ui-xss", `echo '<img src=x onerror=alert(1)>'`)
	dev.submitSpec(map[string]any{"id": "ui-fail", "command": "echo oops >&2; exit 3",
		"labels": map[string]string{"team": "ci"}, "heal": map[string]string{"mode": "off"}})
	dev.wait("ui-xss")
	dev.wait("ui-fail")
	b.waitState("ui-xss", "succeeded", 30*time.Second)
	b.waitState("ui-fail", "failed", 30*time.Second)
	b.testFilters()
	b.testSubmitBox()
	b.shot("jobs.png")

	b.testJobPage()
	b.testHostileOutput()
	b.testCancel(dev)

	// beta's job: not in dev's table, not in dev's list, and its page is
	// empty.
	b.hash("#/jobs")
	b.run(chromedp.WaitVisible(chromedp.CSS(`tr[data-id="ui-watch"]`)))
	assert.Equal(t, 0, b.count(`tr[data-id="ui-beta-only"]`), "another tenant's job is not in the table")
	assert.NotContains(t, dev.get("/v1/jobs"), "ui-beta-only")
	b.hash("#/jobs/ui-beta-only")
	b.waitText("#job-error", "no job ui-beta-only of your tenant", 30*time.Second)
	assert.Empty(t, b.text("#stdout"))

	b.hash("#/fleet")
	b.run(chromedp.WaitVisible(chromedp.ID("workers")))
	b.shot("fleet.png")
	b.hash("#/queues")
	b.run(chromedp.WaitVisible(chromedp.CSS("section.queue")))

	b.noErrors()
}

// testFilters: the state and label filters list only the failed job; the
// id search only the one it names.
func (b *browser) testFilters() {
	b.filter("state", "failed")
	b.poll(30*time.Second, func() bool { return b.rowIDs() == "ui-fail" }, func() string { return "state=failed lists " + b.rowIDs() })
	b.filter("state", "")
	b.filter("label", "team=ci")
	b.poll(30*time.Second, func() bool { return b.rowIDs() == "ui-fail" }, func() string { return "label=team=ci lists " + b.rowIDs() })
	b.filter("label", "")
	b.filter("q", "ui-w")
	b.poll(30*time.Second, func() bool { return b.rowIDs() == "ui-watch" }, func() string { return "q=ui-w lists " + b.rowIDs() })
	b.filter("q", "")
	b.poll(30*time.Second, func() bool { return strings.Count(b.rowIDs(), " ") >= 2 }, func() string { return "no filter lists " + b.rowIDs() })
}

// testSubmitBox: a command submitted from the page (POST /v1/jobs with
// the cookie and the CSRF header) gets a row that ends succeeded.
func (b *browser) testSubmitBox() {
	b.run(chromedp.Click(chromedp.CSS("#submit-box summary")), chromedp.WaitVisible(chromedp.ID("submit-command")),
		chromedp.SendKeys(chromedp.ID("submit-command"), "echo from-the-page"), chromedp.Click(chromedp.ID("submit-button")))
	state := func() string {
		return eval[string](b, `(() => { const r = [...document.querySelectorAll('#jobs-body tr')].find((r) => r.textContent.includes('echo from-the-page')); return r ? r.dataset.state : '' })()`)
	}
	b.poll(time.Minute, func() bool { return state() == "succeeded" }, func() string { return "the submitted job's row is " + state() })
}

// filter sets one field of the jobs page's filter form and applies it.
func (b *browser) filter(name, value string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`(() => { const f = document.getElementById('filters'); f.elements[%q].value = %q; f.requestSubmit(); return true })()`, name, value))
}

// rowIDs is the ids of the jobs table's rows, space-separated, in order.
func (b *browser) rowIDs() string {
	return eval[string](b, `[...document.querySelectorAll('#jobs-body tr')].map((r) => r.dataset.id).join(' ')`)
}

// testJobPage: the watched job's page has its output, its attempt and a
// waterfall with the submit and attempt spans.
func (b *browser) testJobPage() {
	b.hash("#/jobs/ui-watch")
	b.waitText("#stdout", "done", time.Minute)
	b.waitText("#job-state", "succeeded", time.Minute)
	b.waitCount(`#waterfall g[data-name="paddock.submit"]`, 1, time.Minute)
	b.waitCount(`#waterfall g[data-name="paddock.attempt"]`, 1, time.Minute)
	assert.Equal(b.t, 1, b.count(`#attempts tr[data-attempt="1"]`), "the attempt is listed")
	assert.Contains(b.t, b.text("#attempts"), "sleep 2; echo done")
	assert.Contains(b.t, b.text("#limits"), "memory_mb")
	b.shot("job.png")
}

// testHostileOutput: a command and output that are HTML are shown as
// text; no element is made of them and no script runs (a dialog would
// fail noErrors).
func (b *browser) testHostileOutput() {
	b.hash("#/jobs/ui-xss")
	b.waitText("#stdout", "<img src=x onerror=alert(1)>", time.Minute)
	assert.Contains(b.t, b.text("#facts"), "<img src=x onerror=alert(1)>", "the command, as text")
	assert.Equal(b.t, 0, b.count("#page img"), "no element made of job data")
}

// testCancel: a running job's Cancel button ends it canceled.
func (b *browser) testCancel(dev *uiAPI) {
	dev.submit("ui-cancel", "sleep 60")
	b.hash("#/jobs/ui-cancel")
	b.waitText("#job-state", "running", time.Minute)
	// Clicked by script: the page re-renders the job as it changes, and a
	// node id from WaitVisible can be gone by the time a Click uses it.
	b.run(chromedp.WaitVisible(chromedp.ID("cancel")))
	require.True(b.t, eval[bool](b, `(() => { const c = document.getElementById("cancel"); if (c) c.click(); return !!c })()`), "the Cancel button is there")
	b.waitText("#job-state", "canceled", time.Minute)
	assert.Contains(b.t, dev.get("/v1/jobs/ui-cancel"), `"state":"canceled"`)
}

// chromiumPath finds Debian's chromium, installing it when it is missing
// and this is a root Debian machine; it skips only when neither works.
func chromiumPath(t *testing.T) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	// scripts/setup.sh (make test, make ui-test) installs it; a test never
	// installs anything, and never skips silently.
	t.Fatal("no chromium on PATH: run `make setup` (scripts/setup.sh installs Debian's chromium) to run the dashboard's browser test")
	return ""
}

// browser is one headless Chromium tab; it records every console error,
// uncaught exception, error entry of the browser log (a failed load, a
// CSP refusal) and dialog.
type browser struct {
	t *testing.T
	// diag, when set, adds the fleet's side to a failure's message.
	diag func() string
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T, chromium string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx}
	require.NoError(t, chromedp.Do(ctx), "start chromium %s", chromium)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.record(m.String() + " " + m.URL)
			}
		}
	})
	wg.Go(func() {
		for ev, err := range chromedp.Events(ctx, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			b.record("a dialog opened: " + ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	})
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		wg.Wait()
	})
	return b
}

func (b *browser) record(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, msg)
}

func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

func (b *browser) noErrors() {
	b.t.Helper()
	assert.Empty(b.t, b.errors(), "the browser reported errors")
}

// run runs steps with a deadline (the browser lives as long as b.ctx).
func (b *browser) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v\nbrowser errors so far: %v\npage text:\n%s", err, b.errors(), b.pageText())
	}
}

// pageText is the text of the page, for a failure's message.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return text
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(b.t, err, "evaluate %s", expr)
	return v
}

// hash moves the page to another route, as a click on a link does (no
// reload).
func (b *browser) hash(h string) {
	b.t.Helper()
	eval[string](b, fmt.Sprintf(`location.hash = %q`, h))
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

func (b *browser) count(sel string) int {
	b.t.Helper()
	return eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// poll calls f every 100 ms until it is true or within passes.
func (b *browser) poll(within time.Duration, f func() bool, what func() string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if !testsvc.Poll(ctx, 100*time.Millisecond, f) {
		extra := ""
		if b.diag != nil {
			extra = b.diag()
		}
		b.t.Fatalf("%s: not within %s\nbrowser errors: %v\npage text:\n%s\n%s", what(), within, b.errors(), b.pageText(), extra)
	}
}

func (b *browser) waitText(sel, want string, within time.Duration) {
	b.t.Helper()
	b.poll(within, func() bool { return strings.Contains(b.text(sel), want) },
		func() string { return fmt.Sprintf("%s shows %q (it shows %q)", sel, want, b.text(sel)) })
}

func (b *browser) waitCount(sel string, atLeast int, within time.Duration) {
	b.t.Helper()
	b.poll(within, func() bool { return b.count(sel) >= atLeast }, func() string { return sel })
}

func (b *browser) rowState(id string) string {
	return eval[string](b, fmt.Sprintf(`(document.querySelector('tr[data-id=%q]') || {dataset: {}}).dataset.state || ""`, id))
}

func (b *browser) waitState(id, state string, within time.Duration) {
	b.t.Helper()
	b.poll(within, func() bool { return b.rowState(id) == state }, func() string { return "row " + id + " is " + state })
}

// watchStates polls job id's row until it shows final, and returns the
// states it showed, in order.
func (b *browser) watchStates(id, final string, within time.Duration) []string {
	b.t.Helper()
	var seen []string
	b.poll(within, func() bool {
		st := b.rowState(id)
		if st != "" && (len(seen) == 0 || seen[len(seen)-1] != st) {
			seen = append(seen, st)
		}
		return st == final
	}, func() string { return fmt.Sprintf("row %s reaches %s (seen %v)", id, final, seen) })
	return seen
}

// shot saves a full-page PNG into $PADDOCK_UI_SHOTS, when it is set.
func (b *browser) shot(name string) {
	b.t.Helper()
	dir := os.Getenv("PADDOCK_UI_SHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		// make runs the test in cli/: the path is the repo's.
		dir = filepath.Join("..", dir)
	}
	b.run(chromedp.Sleep(300 * time.Millisecond))
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.MkdirAll(dir, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name), buf, 0o644))
}

// uiAPI calls the gateway's /v1 API with a bearer token.
type uiAPI struct {
	t     *testing.T
	base  string
	token string
}

func (a *uiAPI) do(method, path string, body any) (int, string) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(a.t, err)
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	require.NoError(a.t, err)
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	return resp.StatusCode, string(data)
}

func (a *uiAPI) submit(id, command string) {
	a.t.Helper()
	a.submitSpec(map[string]any{"id": id, "command": command})
}

func (a *uiAPI) submitSpec(spec map[string]any) {
	a.t.Helper()
	code, body := a.do(http.MethodPost, "/v1/jobs", spec)
	require.Equal(a.t, http.StatusAccepted, code, body)
}

func (a *uiAPI) wait(id string) {
	a.t.Helper()
	code, body := a.do(http.MethodGet, "/v1/jobs/"+id+"?wait=60s", nil)
	require.Equal(a.t, http.StatusOK, code, body)
}

func (a *uiAPI) get(path string) string {
	a.t.Helper()
	code, body := a.do(http.MethodGet, path, nil)
	require.Equal(a.t, http.StatusOK, code, body)
	return body
}
