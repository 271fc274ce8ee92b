package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/paddockhq/paddock/broker"
	"github.com/paddockhq/paddock/job"
)

func jsonHTMLEscaped(s string) string {
	b, _ := json.Marshal(s) // escapes <, > and & as \u003c …
	return strings.Trim(string(b), `"`)
}

func urlQueryEscaped(s string) string { return url.QueryEscape(s) }

// TestCanaryNowhere makes calls of every kind, then looks for the canary
// secret (and the scoped token) in everything the broker leaves behind:
// the call records, the log, the spans and the metrics.
func TestCanaryNowhere(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	bx := s.serve(acmeJob())
	for _, c := range []struct{ method, url, body string }{
		{"GET", "http://svc/items?q=1", ""},
		{"GET", "http://svc/echo", ""},
		{"GET", "http://tok/echo", ""},
		{"POST", "http://svc/items", `{"a":1}`},
		{"DELETE", "http://svc/items", ""},
		{"GET", "http://narrow/admin", ""},
		{"GET", "http://nosuch/", ""},
		{"GET", "http://other/", ""},
		{"GET", "http://beta-only/", ""},
		{"GET", "http://svc/big", ""},
		{"GET", "http://svc/br", ""},
		{"GET", "http://svc/redirect", ""},
		{"GET", "http://quick/sleep", ""},
		{"GET", "http://limited/", ""}, {"GET", "http://limited/", ""}, {"GET", "http://limited/", ""},
	} {
		a := bx.do(c.method, c.url, c.body)
		for _, form := range secretForms() {
			require.NotContains(t, a.Body+fmt.Sprint(a.Header), form, "%s %s", c.method, c.url)
		}
	}
	bx.raw("GET /x/../y HTTP/1.1\nHost: svc\n\n")
	bx.stop()

	var token string
	for _, r := range s.up.seen() {
		if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && !strings.Contains(v, canary) {
			token = v
		}
	}
	require.NotEmpty(t, token, "the tok grant sent a token")
	calls := bx.calls.Calls()
	require.Len(t, calls, 17)
	recorded, err := json.Marshal(calls)
	require.NoError(t, err)

	spans := s.spans.Ended()
	require.Len(t, spans, 17, "one span per call")
	var spanText strings.Builder
	for _, sp := range spans {
		assert.Equal(t, broker.SpanCall, sp.Name())
		fmt.Fprintf(&spanText, "%s %v %v %v %v\n", sp.Name(), sp.Attributes(), sp.Events(), sp.Status(), sp.Links())
	}
	assert.Contains(t, spanText.String(), job.AttrJobID)

	var rm metricdata.ResourceMetrics
	require.NoError(t, s.metrics.Collect(context.Background(), &rm))
	metricText := fmt.Sprintf("%+v", rm)
	assert.Contains(t, metricText, broker.MetricCalls)

	logs := s.logs.String()
	require.Contains(t, logs, `"component":"broker"`)
	for where, text := range map[string]string{"calls": string(recorded), "spans": spanText.String(), "metrics": metricText, "logs": logs} {
		for _, form := range append(secretForms(), token) {
			assert.NotContains(t, text, form, "the secret is in the %s", where)
		}
	}
	assertCallMetrics(t, rm)
}

// assertCallMetrics checks the calls counter: by grant and status, and a
// Host that names no grant counted as "unknown" (the box chose it).
func assertCallMetrics(t *testing.T, rm metricdata.ResourceMetrics) {
	t.Helper()
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != broker.MetricCalls {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				g, _ := dp.Attributes.Value(broker.AttrGrant)
				st, _ := dp.Attributes.Value("http.response.status_code")
				got[fmt.Sprintf("%s/%d", g.AsString(), st.AsInt64())] += dp.Value
			}
		}
	}
	assert.Equal(t, int64(3), got["svc/200"], "%v", got)
	assert.Equal(t, int64(1), got["unknown/403"], "%v", got)
	assert.Equal(t, int64(1), got["limited/429"], "%v", got)
	assert.NotContains(t, fmt.Sprint(got), "nosuch")
}
