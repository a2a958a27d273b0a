package exampleapp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestPolicyNames drives one request down each way through the service
// (a probe; a sign-up keyed by its nickname pattern, and one with no
// pattern to form, keyed by IP; a reward claim) and checks that the
// policies the decision hook reports are exactly PolicyNames.
func TestPolicyNames(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	cfg := Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DecisionHook: func(ev floodgate.DecisionEvent) {
			mu.Lock()
			defer mu.Unlock()
			if !slices.Contains(seen, ev.Policy) {
				seen = append(seen, ev.Policy)
			}
		},
	}
	h, err := New(cfg, Limiters{
		TokenBucket: func(_ string, r floodgate.Rate) (floodgate.Limiter, error) { return floodgate.NewTokenBucket(r) },
		SlidingLog:  func(_ string, r floodgate.Rate) (floodgate.Limiter, error) { return floodgate.NewSlidingLog(r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct {
		method, path, body string
		status             int
	}{
		{"GET", "/auth/available/user_id?userId=newuser", "", http.StatusOK},
		{"POST", "/signup", `{"nickname":"abc1"}`, http.StatusCreated},
		{"POST", "/signup", `{"nickname":"!!"}`, http.StatusCreated},
		{"POST", "/rewards/claim", `{"accountId":"a1"}`, http.StatusOK},
	} {
		r := httptest.NewRequest(req.method, req.path, strings.NewReader(req.body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != req.status {
			t.Fatalf("%s %s %s: status %d, want %d: %s", req.method, req.path, req.body, w.Code, req.status, w.Body)
		}
	}
	want := PolicyNames()
	slices.Sort(want)
	slices.Sort(seen)
	if !slices.Equal(seen, want) {
		t.Fatalf("policies reported: %v; PolicyNames: %v", seen, want)
	}
}
