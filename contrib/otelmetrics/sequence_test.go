package otelmetrics

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// TestKnownSequence runs the example service (the routes and limits of
// examples/server) with the hook on every limit and every limiter
// watched and its policies declared, checks that a first collection has
// every policy's decisions at 0, drives 10 allowed username probes, 2
// denied ones and 1 sign-up whose body cannot be keyed (an error), and
// checks every decision and store data point, values and attributes,
// through a ManualReader.
func TestKnownSequence(t *testing.T) {
	m, reader := newMetrics(t, WithPolicies(exampleapp.PolicyNames()...))
	clk := floodgatetest.NewClock(metricstest.T0)
	// debtCapacity is each watched limiter's Stats().DebtCapacity: its
	// algorithm's (a sliding log keeps every debt exact, in twice the
	// words of a token bucket's).
	debtCapacity := map[string]int{}
	watch := func(name string, l floodgate.Limiter, err error) (floodgate.Limiter, error) {
		if err != nil {
			return nil, err
		}
		if s, ok := l.(interface{ Stats() floodgate.Stats }); ok {
			debtCapacity[name] = s.Stats().DebtCapacity
		}
		return l, m.Watch(name, l)
	}
	h, err := exampleapp.New(exampleapp.Config{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:        clk.Now,
		DecisionHook: m.Hook(),
	}, exampleapp.Limiters{
		TokenBucket: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewTokenBucket(r, floodgate.WithClock(clk.Now))
			return watch(name, l, err)
		},
		SlidingLog: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewSlidingLog(r, floodgate.WithClock(clk.Now))
			return watch(name, l, err)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	decisions := map[string]float64{}
	for _, p := range exampleapp.PolicyNames() {
		for _, o := range outcomeValues[:metricsbase.Skipped] {
			decisions["floodgate.decisions{floodgate.outcome="+o+",floodgate.policy="+p+"}"] = 0
		}
	}
	metricstest.Want(t, metricstest.Only(points(t, reader), "floodgate.decisions"), decisions)

	do := func(method, target, body string) int {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		r.RemoteAddr = "203.0.113.7:4000"
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := 1; i <= 12; i++ {
		want := http.StatusOK
		if i > 10 {
			want = http.StatusTooManyRequests
		}
		if got := do("GET", "/auth/available/user_id?userId=newuser", ""); got != want {
			t.Fatalf("probe %d: status %d, want %d", i, got, want)
		}
	}
	if got := do("POST", "/signup", "not json"); got != http.StatusBadRequest {
		t.Fatalf("bad sign-up body: status %d, want 400", got)
	}

	got := points(t, reader)
	// The sign-up passes the per-IP and per-network ceilings (allowed),
	// then its body is
	// read by the nickname policy's key function, which refuses it: the
	// error is counted under that policy.
	for k, v := range map[string]float64{
		"floodgate.outcome=allowed,floodgate.policy=user_id_probe":      10,
		"floodgate.outcome=denied,floodgate.policy=user_id_probe":       2,
		"floodgate.outcome=allowed,floodgate.policy=user_id_probe_net":  10,
		"floodgate.outcome=allowed,floodgate.policy=signup_ip_ceiling":  1,
		"floodgate.outcome=allowed,floodgate.policy=signup_net_ceiling": 1,
		"floodgate.outcome=error,floodgate.policy=nickname":             1,
	} {
		decisions["floodgate.decisions{"+k+"}"] = v
	}
	metricstest.Want(t, metricstest.Only(got, "floodgate.decisions"), decisions)
	want := map[string]float64{}
	for _, name := range []string{"probe", "probe-net", "signup-ceiling", "signup-net", "signup-nickname", "signup-ip", "reward-ip", "reward-net", "reward-account"} {
		want["floodgate.store.key.count{floodgate.limiter="+name+"}"] = 0
		want["floodgate.store.key.limit{floodgate.limiter="+name+"}"] = floodgate.DefaultMaxKeys
		want["floodgate.store.evictions{floodgate.eviction.kind=idle,floodgate.limiter="+name+"}"] = 0
		want["floodgate.store.evictions{floodgate.eviction.kind=live,floodgate.limiter="+name+"}"] = 0
		c, ok := debtCapacity[name]
		if !ok || c == 0 {
			t.Fatalf("limiter %q: no debt memory size recorded (%d)", name, c)
		}
		want["floodgate.store.debt.limit{floodgate.limiter="+name+"}"] = float64(c)
		want["floodgate.store.lost_debts{floodgate.debt.kind=merged,floodgate.limiter="+name+"}"] = 0
		want["floodgate.store.lost_debts{floodgate.debt.kind=forgotten,floodgate.limiter="+name+"}"] = 0
	}
	for _, name := range []string{"probe", "probe-net", "signup-ceiling", "signup-net"} {
		want["floodgate.store.key.count{floodgate.limiter="+name+"}"] = 1
	}
	metricstest.Want(t, metricstest.Only(got, "floodgate.store"), want)
}
