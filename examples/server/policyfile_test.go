package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// step is one request of a sequence run against two servers.
type step struct{ method, target, peer, body string }

// answer is what a comparison looks at: the status, the quota headers
// and, on a denial, the body.
type answer struct{ status, rateLimit, policy, retryAfter, body string }

func answerOf(w *httptest.ResponseRecorder) answer {
	a := answer{status: fmt.Sprint(w.Code), rateLimit: w.Header().Get("RateLimit"),
		policy: w.Header().Get("RateLimit-Policy"), retryAfter: w.Header().Get("Retry-After")}
	if w.Code == http.StatusTooManyRequests {
		a.body = w.Body.String()
	}
	return a
}

// TestPolicyFileMatchesBuiltIn: policies.json, the example's policy
// file, limits as the built-in limits do: the same statuses, quota
// headers and denial bodies, request by request, on the probe (per IP
// and per /48), the sign-up (ceilings, nickname pattern, IP fallback)
// and the reward claim, also after time passes.
func TestPolicyFileMatchesBuiltIn(t *testing.T) {
	builtIn := newTestServer(t)
	data, err := os.ReadFile("policies.json")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := exampleapp.NewPolicyServer(data, exampleapp.PolicyOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: builtIn.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	fromFile := &testServer{t: t, h: ps, clock: builtIn.clock}
	var steps []step
	for i := 0; i < 12; i++ {
		steps = append(steps, step{"GET", "/auth/available/user_id?userId=newuser", "192.0.2.1:1234", ""})
	}
	for i := 0; i < 110; i++ { // 110 /64s of one /48: the network's 100
		steps = append(steps, step{"GET", "/auth/available/user_id?userId=x", fmt.Sprintf("[2001:db8:1:%x::1]:1234", i), ""})
	}
	for i := 1; i <= 7; i++ {
		steps = append(steps, step{"POST", "/signup", "192.0.2.2:1234", fmt.Sprintf(`{"nickname":"abc%d"}`, i)})
	}
	for i := 0; i < 25; i++ { // no pattern: the IP's 20 a minute, then its ceiling of 30 an hour
		steps = append(steps, step{"POST", "/signup", "192.0.2.2:1234", fmt.Sprintf(`{"nickname":"u%d"}`, i)})
	}
	for i := 0; i < 3; i++ {
		steps = append(steps, step{"POST", "/rewards/claim", "192.0.2.4:1234", `{"accountId":"acc1"}`})
	}
	steps = append(steps, step{"POST", "/rewards/claim", "192.0.2.4:1234", `{}`}, step{"GET", "/healthz", "192.0.2.4:1234", ""})
	run := func(steps []step) {
		for i, s := range steps {
			want := answerOf(builtIn.do(s.method, s.target, s.peer, s.body))
			got := answerOf(fromFile.do(s.method, s.target, s.peer, s.body))
			if got != want {
				t.Fatalf("step %d %+v: from the file %+v, built in %+v", i, s, got, want)
			}
		}
	}
	run(steps)
	builtIn.clock.Advance(time.Minute)
	run(steps)
}

// TestPolicyFlagsConflict: the flags the file replaces are refused
// beside it, not silently ignored.
func TestPolicyFlagsConflict(t *testing.T) {
	for _, flag := range []string{"-trusted-proxy=10.0.0.0/8", "-turnstile-hostname=example.com", "-turnstile-action=signup"} {
		err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-policies", "policies.json", flag}, &strings.Builder{}, nil)
		if err == nil || !strings.Contains(err.Error(), "set it in the policy file") {
			t.Errorf("%s with -policies: %v, want refused", flag, err)
		}
	}
}
