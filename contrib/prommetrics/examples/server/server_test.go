package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// syncBuffer is a bytes.Buffer safe for the servers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs the example on loopback ports chosen by the system and
// returns its two addresses; it is stopped, and must stop cleanly, when t
// ends.
func startServer(t *testing.T) (app, metrics string) {
	t.Helper()
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err != nil {
		if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
			t.Fatalf("no loopback listener: %v", err)
		}
		t.Skipf("skipping: no loopback listener: %v", err)
	} else {
		_ = l.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ app, metrics string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0"}, logs,
			func(a, m string) { ready <- addrs{a, m} })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after cancel: %v", err)
			}
		case <-time.After(exampleapp.ShutdownGrace + 5*time.Second):
			t.Error("server did not stop")
		}
	})
	select {
	case a := <-ready:
		return a.app, a.metrics
	case err := <-done:
		t.Fatalf("run: %v; logs: %s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	return "", ""
}

var client = &http.Client{Timeout: 5 * time.Second}

func status(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestMetricsAfterKnownTraffic drives 10 allowed username probes, 2
// denied ones and 1 sign-up whose body cannot be keyed (an error), over
// HTTP, then scrapes /metrics over HTTP and parses it with the Prometheus
// text-format parser: every decision series has its exact count, the
// probe limiter's store holds the one client, and the exposition passes
// promlint.
func TestMetricsAfterKnownTraffic(t *testing.T) {
	app, metrics := startServer(t)
	for i := 1; i <= 12; i++ {
		want := http.StatusOK
		if i > 10 {
			want = http.StatusTooManyRequests
		}
		if got := status(t, "GET", "http://"+app+"/auth/available/user_id?userId=newuser", ""); got != want {
			t.Fatalf("probe %d: status %d, want %d", i, got, want)
		}
	}
	if got := status(t, "POST", "http://"+app+"/signup", "not json"); got != http.StatusBadRequest {
		t.Fatalf("bad sign-up body: status %d, want 400", got)
	}
	if got := status(t, "GET", "http://"+app+"/healthz", ""); got != http.StatusOK {
		t.Fatalf("healthz: status %d", got)
	}

	body, families := scrape(t, metrics)
	decisions := decisionCounts(t, families)
	// The sign-up passes the per-IP and per-network ceilings (allowed),
	// then its body is read by the nickname policy's key function, which
	// refuses it: the error is counted under that policy.
	want := zeroDecisions()
	want["user_id_probe/allowed"] = 10
	want["user_id_probe/denied"] = 2
	want["user_id_probe_net/allowed"] = 10
	want["signup_ip_ceiling/allowed"] = 1
	want["signup_net_ceiling/allowed"] = 1
	want["nickname/error"] = 1
	if len(decisions) != len(want) {
		t.Errorf("decision series %v, want %v", decisions, want)
	}
	for k, v := range want {
		if decisions[k] != v {
			t.Errorf("floodgate_decisions_total %s = %v, want %v", k, decisions[k], v)
		}
	}

	stores := map[string]float64{}
	for _, mt := range family(t, families, "floodgate_store_keys", dto.MetricType_GAUGE).GetMetric() {
		stores[label(mt, "limiter")] = mt.GetGauge().GetValue()
	}
	wantStores := map[string]float64{"probe": 1, "probe-net": 1, "signup-ceiling": 1, "signup-net": 1, "signup-nickname": 0,
		"signup-ip": 0, "reward-ip": 0, "reward-net": 0, "reward-account": 0}
	if len(stores) != len(wantStores) {
		t.Errorf("store series %v, want %v", stores, wantStores)
	}
	for k, v := range wantStores {
		if stores[k] != v {
			t.Errorf("floodgate_store_keys{limiter=%q} = %v, want %v", k, stores[k], v)
		}
	}
	for _, mt := range family(t, families, "floodgate_store_evictions_total", dto.MetricType_COUNTER).GetMetric() {
		if v := mt.GetCounter().GetValue(); v != 0 {
			t.Errorf("evictions %s/%s = %v, want 0", label(mt, "limiter"), label(mt, "kind"), v)
		}
	}

	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "floodgate_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// scrape gets /metrics over HTTP and parses it with the Prometheus
// text-format parser.
func scrape(t *testing.T, metrics string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := client.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	return body, families
}

// decisionCounts returns floodgate_decisions_total as "policy/outcome" →
// value.
func decisionCounts(t *testing.T, families map[string]*dto.MetricFamily) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, mt := range family(t, families, "floodgate_decisions_total", dto.MetricType_COUNTER).GetMetric() {
		out[label(mt, "policy")+"/"+label(mt, "outcome")] = mt.GetCounter().GetValue()
	}
	return out
}

// zeroDecisions is every decision series of the example at 0: each
// policy it has, with the four outcomes its hook reports.
func zeroDecisions() map[string]float64 {
	out := map[string]float64{}
	for _, p := range exampleapp.PolicyNames() {
		for _, o := range []string{"allowed", "denied", "dry_run_denied", "error"} {
			out[p+"/"+o] = 0
		}
	}
	return out
}

// TestEverySeriesBeforeFirstRequest: the first scrape, before any
// request, already has every policy's decision series, at 0. Without
// them the first sample Prometheus stores of a series is its count after
// the first burst, and increase() never sees that burst.
func TestEverySeriesBeforeFirstRequest(t *testing.T) {
	_, metrics := startServer(t)
	_, families := scrape(t, metrics)
	got, want := decisionCounts(t, families), zeroDecisions()
	if len(got) != len(want) {
		t.Errorf("decision series %v, want %v", got, want)
	}
	for k := range want {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("floodgate_decisions_total %s = %v (present %v), want 0", k, v, ok)
		}
	}
}

func family(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no %s in the scrape", name)
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want a %v", name, f.GetType(), typ)
	}
	return f
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// TestRunRefusesBadFlags: a bad flag is an error, before anything
// listens.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-metrics-addr", ""},
		{"-trusted-proxy", "nonsense"},
		{"-no-such-flag"},
	} {
		if err := run(context.Background(), args, io.Discard, nil); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}
