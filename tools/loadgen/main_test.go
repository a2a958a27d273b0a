package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// limitedServer answers 200 for the first perKey requests of each
// X-Forwarded-For value and 429 afterwards; status overrides it for every
// failEvery-th request when set.
func limitedServer(perKey int, failEvery int) *httptest.Server {
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		key := r.Header.Get("X-Forwarded-For")
		seen[key]++
		n := seen[key]
		total++
		t := total
		mu.Unlock()
		switch {
		case failEvery > 0 && t%failEvery == 0:
			w.WriteHeader(http.StatusInternalServerError)
		case n > perKey:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
}

func TestRunCountsStatusesAndStopsAtMaxRequests(t *testing.T) {
	srv := limitedServer(2, 0)
	defer srv.Close()
	rep, err := run(context.Background(), config{
		url: srv.URL, duration: 20 * time.Second, maxRequests: 400, concurrency: 8, keys: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.requests != 400 {
		t.Fatalf("requests = %d, want exactly 400", rep.requests)
	}
	// 50 keys × 2 allowed each; the other 300 are the intended 429s.
	if rep.statuses[200] != 100 || rep.statuses[429] != 300 {
		t.Fatalf("statuses = %v, want 100×200 and 300×429", rep.statuses)
	}
	if rep.unexpected != 0 {
		t.Fatalf("unexpected = %d, want 0", rep.unexpected)
	}
	if len(rep.latencies) != 400 || rep.percentile(0.5) <= 0 || rep.percentile(0.99) < rep.percentile(0.5) {
		t.Fatalf("latencies: %d samples, p50 %s p99 %s", len(rep.latencies), rep.percentile(0.5), rep.percentile(0.99))
	}
}

func TestRunReportsUnexpectedStatuses(t *testing.T) {
	srv := limitedServer(1000, 10)
	defer srv.Close()
	rep, err := run(context.Background(), config{
		url: srv.URL, duration: 20 * time.Second, maxRequests: 100, concurrency: 4, keys: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.statuses[500] != 10 || rep.unexpected != 10 {
		t.Fatalf("statuses %v, unexpected %d: want 10 × 500 counted as unexpected", rep.statuses, rep.unexpected)
	}
	var out strings.Builder
	if err := rep.print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "unexpected    10") {
		t.Fatalf("report does not show the failures:\n%s", out.String())
	}
}

func TestValidateRefusesUnboundedOrRemoteRuns(t *testing.T) {
	ok := config{url: "http://127.0.0.1:1/", duration: time.Second, maxRequests: 1, concurrency: 1, keys: 1}
	if err := ok.validate(); err != nil {
		t.Fatalf("loopback config refused: %v", err)
	}
	for name, mutate := range map[string]func(*config){
		"private address": func(c *config) { c.url = "http://10.0.0.1/" },
		"public address":  func(c *config) { c.url = "http://192.0.2.1/" },
		"no scheme":       func(c *config) { c.url = "127.0.0.1:80" },
		"too long":        func(c *config) { c.duration = time.Hour },
		"zero requests":   func(c *config) { c.maxRequests = 0 },
		"zero workers":    func(c *config) { c.concurrency = 0 },
		"zero keys":       func(c *config) { c.keys = 0 },
	} {
		c := ok
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

func TestClientIPIsDistinctPerKey(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 70000; i++ {
		ip := clientIP(i)
		if seen[ip] {
			t.Fatalf("clientIP(%d) = %s repeats", i, ip)
		}
		seen[ip] = true
	}
}
