package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/floodgate-go/floodgate/turnstile"
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

// TestSignupScenarioFile: policies-signup.json, scenario B, puts the bot
// check before every sign-up limit: 40 attempts without a token are
// refused (400) and cost nobody's quota, so the next 5 sign-ups of a
// pattern pass, the 6th is denied, and the ceiling has counted only the
// 6; the reward claim is not bot-checked.
func TestSignupScenarioFile(t *testing.T) {
	_, siteverify := startDummySiteverify(t)
	data, err := os.ReadFile("policies-signup.json")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := policyOptions(logger, "1x0000000000000000000000000000000AA")
	if opts.BotCheck == nil || !opts.RequireBotCheck {
		t.Fatal("with a secret, policyOptions neither builds nor requires a bot check")
	}
	// The same bot check, verifying against the local dummy siteverify.
	opts.BotCheck = func(spec exampleapp.BotCheckSpec, proxies []netip.Prefix) (func(http.Handler) http.Handler, error) {
		bc := botCheckConfig{Secret: "1x0000000000000000000000000000000AA", Hostnames: spec.Hostnames, Action: spec.Action}
		return newBotCheck(bc, proxies, logger, turnstile.WithEndpoint(siteverify))
	}
	clk := floodgatetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	opts.Clock = clk.Now
	ps, err := exampleapp.NewPolicyServer(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, h: ps, clock: clk}
	const peer = "192.0.2.10:1234"
	for i := 0; i < 40; i++ {
		if w := s.signupWithToken(peer, "abc"+strconv.Itoa(i), ""); w.Code != http.StatusBadRequest {
			t.Fatalf("attempt %d without a token: %d, want 400", i, w.Code)
		}
	}
	for i := 1; i <= 6; i++ {
		w := s.signupWithToken(peer, "abc"+strconv.Itoa(i), "XXXX.DUMMY.TOKEN.XXXX")
		want := http.StatusCreated
		if i == 6 {
			want = http.StatusTooManyRequests
		}
		if w.Code != want {
			t.Fatalf("sign-up %d with a token: %d, want %d", i, w.Code, want)
		}
		if i == 6 && !strings.Contains(strings.Join(w.Header().Values("RateLimit"), ","), `"signup_ip_ceiling";r=24;`) {
			t.Fatalf("the ceiling counted more than the 6 checked attempts: %q", w.Header().Values("RateLimit"))
		}
	}
	if w := s.do("POST", "/rewards/claim", peer, `{"accountId":"a1"}`); w.Code != http.StatusOK {
		t.Fatalf("reward claim without a token: %d, want 200", w.Code)
	}
}
