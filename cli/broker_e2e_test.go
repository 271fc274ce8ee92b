package cli

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
	"github.com/paddockhq/paddock/job"
)

// brokerHunt runs in the box: it looks for the canary (given in two halves,
// so that no command line or file of the job holds it whole) in every
// process's environment and command line and in every file outside /proc
// and /sys, and for a control string it planted itself, to show the search
// works. It prints "canary=N control=M".
const brokerHunt = `import os, sys
canary = (sys.argv[1] + sys.argv[2]).encode()
control = (b"CONTROL" + b"-MARK-" + b"7").decode().encode()
open("/tmp/control", "wb").write(control)
hits = {canary: 0, control: 0}
def look(data):
    for k in hits:
        if k in data:
            hits[k] += 1
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                look(open("/proc/%s/%s" % (pid, f), "rb").read())
            except OSError:
                pass
for top, dirs, files in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for f in files:
        p = os.path.join(top, f)
        try:
            if os.path.isfile(p) and not os.path.islink(p):
                look(open(p, "rb").read(1 << 24))
        except OSError:
            pass
print("canary=%d control=%d" % (hits[canary], hits[control]))
`

// brokerScript calls the broker every way the policy refuses, and once
// directly, printing one line per call: "name=STATUS rule=RULE".
const brokerScript = `S=/.paddock/broker.sock; U=http://upstream
c() { curl -sS --max-time 20 --unix-socket $S -o /tmp/body -D /tmp/hdr -w '%{http_code}' "$@"; }
rule() { grep -i '^x-paddock-broker-rule:' /tmp/hdr | tr -d '\r' | cut -d' ' -f2; }
code=$(c $U/repos/x/y); echo "get=$code rule=$(rule) body=$(cat /tmp/body)"
grep -ic '^x-echo' /tmp/hdr | sed 's/^/echo_headers=/'
code=$(c -X DELETE $U/repos/x/y); echo "method=$code rule=$(rule) msg=$(cat /tmp/body)"
code=$(c $U/orgs/x); echo "path=$code rule=$(rule) msg=$(cat /tmp/body)"
head -c 2000 /dev/zero | tr '\0' a > /tmp/big
code=$(c -X POST --data-binary @/tmp/big $U/repos/x); echo "size=$code rule=$(rule) msg=$(cat /tmp/body)"
code=$(c http://nope/x); echo "unknown=$code rule=$(rule)"
for i in $(seq 12); do code=$(c $U/repos/x/y); [ "$code" = 429 ] && break; done
echo "rate=$code rule=$(rule) msg=$(cat /tmp/body)"
curl -sS --max-time 3 "$DIRECT" -o /dev/null 2>/dev/null; echo "direct_exit=$?"
python3 hunt.py "$HALF1" "$HALF2"
`

// upstream is the "real system": a TLS server on loopback that wants the
// canary as its bearer token and echoes it back (in a header and in the
// body) to see that the broker strips and redacts it.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func newUpstream(t *testing.T, canary string) *upstream {
	u := &upstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+canary {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		fmt.Fprintf(w, `{"repo":%q,"you_sent":%q}`, r.URL.Path, r.Header.Get("Authorization"))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// brokerFleet writes the operator's side (policy, secrets, the upstream's
// CA) and starts `paddock up` with it.
func brokerFleet(t *testing.T, canary, upstreamURL string, llmURL string, cert []byte) *devStack {
	dir := t.TempDir()
	policy := fmt.Sprintf(`{"version": 1,
  "grants": [{"name": "upstream", "url": %q, "methods": ["GET", "POST"], "paths": ["/repos"],
    "headers": {"Authorization": "Bearer ${secret:upstream-token}"},
    "max_request_bytes": 1024, "rate": {"per_second": 0.01, "burst": 4}},
    {"name": "heal-read", "url": %q, "paths": ["/repos"], "headers": {"Authorization": "Bearer ${secret:upstream-token}"}}],
  "tenants": {"dev": ["upstream", "heal-read"]}}`, upstreamURL, upstreamURL)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "policy.json"), []byte(policy), 0o600))
	secrets := filepath.Join(dir, "secrets")
	require.NoError(t, os.Mkdir(secrets, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(secrets, "upstream-token"), []byte(canary+"\n"), 0o600))
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}), 0o600))
	return startUpWith(t, "--broker-policy", filepath.Join(dir, "policy.json"), "--broker-secrets-dir", secrets,
		"--broker-ca-file", ca, "--images", debianImage, "--llm-url", llmURL, "--llm-model", "test")
}

const debianImage = "paddock/sandbox:latest"

// A job reaches a granted HTTPS endpoint through the broker without ever
// holding its key; every refusal is clear; the canary secret appears
// nowhere (box, output, result, logs, spans, the heal prompt); another
// tenant cannot name the grant.
func TestBrokerEndToEnd(t *testing.T) {
	testsvc.RequireImage(t, testsvc.Docker(t), debianImage)
	half1, half2 := "pdk-canary-", testsvc.Unique("s3cr3t")
	canary := half1 + half2
	up := newUpstream(t, canary)
	var prompts syncBuffer
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = prompts.Write(append(b, '\n'))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"model":"test","choices":[{"message":{"role":"assistant","content":"no idea"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(llm.Close)
	s := brokerFleet(t, canary, up.srv.URL, llm.URL, up.srv.Certificate().Raw)

	spec := job.Spec{ID: "brk-1", Image: debianImage, Command: brokerScript, Grants: []string{"upstream"},
		Env:   map[string]string{"DIRECT": up.srv.URL + "/repos/x/y", "HALF1": half1, "HALF2": half2},
		Files: []job.File{{Path: "hunt.py", ContentB64: base64.StdEncoding.EncodeToString([]byte(brokerHunt))}}}
	r := submitSpec(t, s, spec)
	require.Equal(t, job.ReasonOK, r.Reason, "%s\n%s", r.Error, r.Stderr.Text)
	out := parseLines(r.Stdout.Text)
	assert.True(t, strings.HasPrefix(out["get"], "200 rule= "), r.Stdout.Text)
	assert.Contains(t, r.Stdout.Text, `you_sent":"[REDACTED]"`, "the echoed secret is redacted")
	assert.Equal(t, "echo_headers=0", lineOf(r.Stdout.Text, "echo_headers="), "a header holding the secret is stripped")
	for name, want := range map[string]string{"method": "403 rule=method", "path": "403 rule=path",
		"size": "413 rule=request_size", "unknown": "403 rule=unknown_grant", "rate": "429 rule=rate"} {
		assert.True(t, strings.HasPrefix(out[name], want), "%s: %q, want %q", name, out[name], want)
	}
	assert.Contains(t, lineOf(r.Stdout.Text, "method="), "grant upstream: method DELETE not allowed")
	assert.NotEqual(t, "0", out["direct_exit"], "the box has no network")
	assert.Equal(t, "0 control=1", out["canary"], "the canary is nowhere in the box; the search found its control")

	require.NotNil(t, r.Broker)
	rules := map[string]int{}
	for _, c := range r.Broker.Calls {
		rules[c.Rule]++
	}
	for _, rule := range []string{"method", "path", "request_size", "unknown_grant", "rate"} {
		assert.Positive(t, rules[rule], "a %s refusal is recorded on the result: %v", rule, rules)
	}
	assert.Positive(t, rules[""], "the granted calls are recorded")
	up.mu.Lock()
	assert.Contains(t, up.auth, "Bearer "+canary, "the broker injected the secret")
	up.mu.Unlock()

	// A job without grants finds its socket closed.
	none := submitSpec(t, s, job.Spec{ID: "brk-none", Image: debianImage,
		Command: "test -S /.paddock/broker.sock && echo socket; curl -sS --max-time 5 --unix-socket /.paddock/broker.sock http://upstream/repos/x/y; echo exit=$?"})
	assert.Equal(t, "socket\nexit=7\n", none.Stdout.Text, "connection refused: %s", none.Stderr.Text)
	assert.Nil(t, none.Broker)

	// A failing job healed by the LLM: its prompt holds the job's output,
	// never the secret. (Its own grant: brk-1 used up the tenant's rate of
	// "upstream", which every job of the tenant shares.)
	heal := job.Spec{ID: "brk-heal", Image: debianImage, Grants: []string{"heal-read"}, Heal: &job.HealPolicy{Mode: job.HealLLM},
		Command: "curl -sS --unix-socket /.paddock/broker.sock http://heal-read/repos/x/y; echo; echo needs-fixing >&2; exit 3"}
	rh := submitSpec(t, s, heal)
	assert.Equal(t, job.ReasonExitNonzero, rh.Reason, rh.Error)
	require.Eventually(t, func() bool { return strings.Contains(prompts.String(), "needs-fixing") }, 30*time.Second, 50*time.Millisecond,
		"the LLM was asked about the failure")
	assert.Contains(t, prompts.String(), "REDACTED", "the prompt holds the broker's answer")

	// Tenant beta has no grant: its job is rejected before any container.
	beta := s.addTenant(t, "beta")
	code, rb := s.result(t, beta, "submit", "--wait", "--image", debianImage, "--grant", "upstream", "--", "true")
	assert.Equal(t, exitJobs, code)
	assert.Equal(t, job.ReasonRejected, rb.Reason)
	require.NotEmpty(t, rb.Errors)
	assert.Equal(t, "grants[0]", rb.Errors[0].Field)
	assert.Contains(t, rb.Errors[0].Message, `tenant "beta" has no grant "upstream"`)

	// The canary is nowhere the fleet writes: results, logs, spans.
	for _, id := range []string{"brk-1", "brk-heal"} {
		_, raw, _ := s.cli(t, "-o", "json", "get", id)
		assert.NotContains(t, raw, canary, "result of %s", id)
	}
	assert.NotContains(t, r.Stdout.Text+r.Stderr.Text+rh.Stdout.Text+rh.Stderr.Text, canary)
	assert.NotContains(t, prompts.String(), canary, "the heal prompt")
	spans := filepath.Join(s.dir, "spans.jsonl")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(spans)
		return strings.Contains(string(b), "paddock.broker.call")
	}, 30*time.Second, 100*time.Millisecond, "the broker's calls are spans")
	b, err := os.ReadFile(spans)
	require.NoError(t, err)
	assert.NotContains(t, string(b), canary, "spans")
	assert.NotContains(t, s.stderr.String(), canary, "logs")
}

// submitSpec submits spec as the dev tenant with `paddock submit --file`
// and waits for its result.
func submitSpec(t *testing.T, s *devStack, spec job.Spec) job.Result {
	t.Helper()
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	f := filepath.Join(t.TempDir(), "spec.jsonl")
	require.NoError(t, os.WriteFile(f, append(b, '\n'), 0o600))
	_, out, stderr := s.cli(t, "-o", "json", "submit", "--wait", "--file", f)
	var r job.Result
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &r), "%s\n%s", out, stderr)
	return r
}

// parseLines maps "name=rest" lines to rest.
func parseLines(text string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			m[k] = v
		}
	}
	return m
}

func lineOf(text, prefix string) string {
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
