package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestPrometheusSeesFirstWave runs a real Prometheus server (the
// prometheus binary on the PATH: Debian's prometheus package) that
// scrapes the example's /metrics every 100 ms. Once it has scraped the
// idle server, 10 username probes are allowed and 2 denied; once a
// scrape shows them, increase() and rate() over the whole run, evaluated
// at that scrape, must count exactly those 12 decisions. Before every
// policy's series existed at 0 from the start, the first sample of each
// series was already 10 (or 2), and increase() over it was 0: an
// attack's first wave never reached a rate-based alert.
func TestPrometheusSeesFirstWave(t *testing.T) {
	bin := prometheusBinary(t)
	app, metrics := startServer(t)
	prom := startPrometheus(t, bin, metrics)

	// One scrape of the idle server, then the first wave.
	waitForResult(t, prom, `up{job="floodgate"} == 1`)
	for i := 1; i <= 12; i++ {
		want := http.StatusOK
		if i > 10 {
			want = http.StatusTooManyRequests
		}
		if got := status(t, "GET", "http://"+app+"/auth/available/user_id?userId=wave", ""); got != want {
			t.Fatalf("probe %d: status %d, want %d", i, got, want)
		}
	}
	last := `floodgate_decisions_total{policy="user_id_probe",outcome="denied"}`
	waitForResult(t, prom, last+` == 2`)
	// Evaluated at the scrape that saw the wave, no extrapolation past it
	// inflates the result: it is exact.
	at := query(t, prom, `timestamp(`+last+`)`, "")["denied"]
	stamp := strconv.FormatFloat(at, 'f', 3, 64)
	want := map[string]float64{"allowed": 10, "denied": 2, "dry_run_denied": 0, "error": 0}
	for expr, scale := range map[string]float64{
		`increase(floodgate_decisions_total{policy="user_id_probe"}[1h])`: 1,
		`rate(floodgate_decisions_total{policy="user_id_probe"}[1h])`:     3600,
	} {
		got := query(t, prom, expr, stamp)
		if len(got) != len(want) {
			t.Errorf("%s = %v, want a result for each of %v", expr, got, want)
		}
		for outcome, w := range want {
			if v, ok := got[outcome]; !ok || math.Abs(v*scale-w) > 1e-9 {
				t.Errorf("%s{outcome=%q} × %v = %v (present %v), want %v", expr, outcome, scale, v*scale, ok, w)
			}
		}
	}
}

// prometheusBinary returns the path of the prometheus binary, or skips
// the test (fails it with FLOODGATE_REQUIRE_SERVERS=1) when there is none.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		const why = "no prometheus binary on the PATH; apt-get install prometheus (Debian, Ubuntu) to run this test"
		if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
			t.Fatalf("%s (FLOODGATE_REQUIRE_SERVERS=1 forbids skipping)", why)
		}
		t.Skip("skipping: " + why)
	}
	return bin
}

// startPrometheus starts bin scraping target every 100 ms, with its data
// in a temporary directory, on a free loopback port; it returns the
// server's base URL once it is ready, and stops it when t ends.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 100ms
  scrape_timeout: 100ms
scrape_configs:
  - job_name: floodgate
    static_configs:
      - targets: [%q]
`, target), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v\n%s", err, logs)
		default:
		}
		if resp, err := client.Get(base + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 60s\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// waitForResult polls the instant query expr until it has a result, for
// at most 30 s.
func waitForResult(t *testing.T, prom, expr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(query(t, prom, expr, "")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no result for %s after 30s", expr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// query evaluates the instant query expr at time at (a Unix time in
// seconds; empty: now) through Prometheus's HTTP API and returns its
// vector by outcome label (empty for a series without one).
func query(t *testing.T, prom, expr, at string) map[string]float64 {
	t.Helper()
	params := url.Values{"query": {expr}}
	if at != "" {
		params.Set("time", at)
	}
	resp, err := client.Get(prom + "/api/v1/query?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("query %s: %v %s %s", expr, err, body.Status, body.Error)
	}
	out := map[string]float64{}
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", expr, r.Value, err)
		}
		out[r.Metric["outcome"]] = v
	}
	return out
}
