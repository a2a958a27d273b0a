package floodgate

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/time/rate"
)

// TestSharedLimiterAcrossPoliciesRefused is issue 18 item 7: a selector
// whose "user" and "ip" policies share one limiter lets a user named
// 198.51.100.10 spend that address's quota, so that its owner's first
// request is denied. Such a selector is refused at construction, also when
// the limiter is shared inside a Composite; before the fix it was built
// and the owner got 429.
func TestSharedLimiterAcrossPoliciesRefused(t *testing.T) {
	shared := mustTokenBucket(t, PerHour(3))
	other := mustTokenBucket(t, PerMinute(10))
	both, err := All(other, shared)
	if err != nil {
		t.Fatal(err)
	}
	user := mustKey(KeyByHeader("X-User"))
	ip := mustKeyByIP(t)
	for name, limiters := range map[string][2]Limiter{
		"one limiter":           {shared, shared},
		"inside a Composite":    {both, shared},
		"inside two Composites": {both, mustAll(t, shared, mustTokenBucket(t, PerMinute(1)))},
	} {
		t.Run(name, func(t *testing.T) {
			sel, err := NewPolicySelector(
				Policy{Name: "user", Limiter: limiters[0], Key: user},
				Policy{Name: "ip", Limiter: limiters[1], Key: ip},
			)
			if err == nil {
				t.Fatalf("built; the address's owner then gets %d on its first request", squatAddress(t, sel))
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, `"user"`) || !strings.Contains(msg, `"ip"`) || !strings.Contains(msg, "own limiter") {
				t.Fatalf("err = %v; want ErrInvalidOption naming both policies and the fix", err)
			}
		})
	}
}

// squatAddress spends the quota of 198.51.100.10 as a user of that name,
// then returns the status its owner's first request gets.
func squatAddress(t *testing.T, sel *PolicySelector) int {
	t.Helper()
	mw, err := NewPolicyMiddleware(sel)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.RemoteAddr = "203.0.113.66:1"
		r.Header.Set("X-User", "198.51.100.10")
		serve(h, r)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.10:1"
	return serve(h, r).Code
}

// TestSharedLimiterAllowed: limiters that cannot mix the keys of two
// policies are accepted: a keyless SharedLimiter (one global cap) in two
// policies' Composites, and one limiter in the policies of one name in
// two routes (a budget per IP across routes).
func TestSharedLimiterAllowed(t *testing.T) {
	global, err := FromRateLimiter(rate.NewLimiter(100, 100))
	if err != nil {
		t.Fatal(err)
	}
	user := mustKey(KeyByHeader("X-User"))
	ip := mustKeyByIP(t)
	if _, err := NewPolicySelector(
		Policy{Name: "user", Limiter: mustAll(t, mustTokenBucket(t, PerHour(3)), global), Key: user},
		Policy{Name: "ip", Limiter: mustAll(t, mustTokenBucket(t, PerHour(30)), global), Key: ip},
	); err != nil {
		t.Errorf("a global SharedLimiter in two policies: %v", err)
	}
	perIP := mustTokenBucket(t, PerMinute(60))
	if _, err := NewRoutes(
		Route{Pattern: "GET /a", Policies: []Policy{{Name: "ip", Limiter: perIP, Key: ip}}},
		Route{Pattern: "GET /b", Policies: []Policy{{Name: "ip", Limiter: perIP, Key: ip}}},
	); err != nil {
		t.Errorf("one per-IP budget across routes: %v", err)
	}
}

// TestSharedLimiterAcrossRoutesRefused: across routes, a limiter shared by
// policies of different names (different kinds of key) is the same
// collision, and refused.
func TestSharedLimiterAcrossRoutesRefused(t *testing.T) {
	shared := mustTokenBucket(t, PerHour(3))
	user := mustKey(KeyByHeader("X-User"))
	ip := mustKeyByIP(t)
	_, err := NewRoutes(
		Route{Pattern: "GET /a", Policies: []Policy{{Name: "ip", Limiter: shared, Key: ip}}},
		Route{Pattern: "POST /b", Policies: []Policy{
			{Name: "user", Limiter: mustAll(t, shared, mustTokenBucket(t, PerMinute(1))), Key: user},
			{Name: "fallback", Limiter: mustTokenBucket(t, PerMinute(1)), Key: ip},
		}},
	)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, `"POST /b"`) || !strings.Contains(msg, `"GET /a"`) || !strings.Contains(msg, `"user"`) {
		t.Fatalf("err = %v; want ErrInvalidOption naming both routes and policies", err)
	}
}

// TestErrorsNamePolicyFirst: every error about a policy starts with its
// name, then the sentinel's text, then what is wrong; a route's pattern,
// where there is one, comes before the policy (issue 24 item 6: the
// prefix came in different orders).
func TestErrorsNamePolicyFirst(t *testing.T) {
	lim := mustTokenBucket(t, PerMinute(2))
	key := KeyByMethod()
	sel := func(ps ...Policy) error { _, err := NewPolicySelector(ps...); return err }
	mw := func(opts ...MiddlewareOption) error {
		s, err := NewPolicySelector(Policy{Name: "p1", Limiter: &fakeLimiter{}, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewPolicyMiddleware(s, opts...)
		return err
	}
	selectErr := func() error {
		s, err := NewPolicySelector(
			Policy{Name: "p1", Limiter: mustTokenBucket(t, PerMinute(1)), Key: mustKey(KeyByHeader("X-A"))},
			Policy{Name: "p2", Limiter: mustTokenBucket(t, PerMinute(1)), Key: mustKey(KeyByHeader("X-B"))},
		)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = s.Select(httptest.NewRequest(http.MethodGet, "/", nil))
		return err
	}
	errs := map[string]error{
		"no limiter":        sel(Policy{Name: "p1", Key: key}),
		"no key":            sel(Policy{Name: "p1", Limiter: lim}),
		"name twice":        sel(Policy{Name: "p1", Limiter: lim, Key: key}, Policy{Name: "p1", Limiter: mustTokenBucket(t, PerMinute(1)), Key: key}),
		"bad name":          sel(Policy{Name: "p\u00e91", Limiter: lim, Key: key}),
		"shared limiter":    sel(Policy{Name: "p1", Limiter: lim, Key: key}, Policy{Name: "p2", Limiter: lim, Key: key}),
		"cost":              func() error { _, err := NewMiddleware(lim, WithCost(3), WithPolicyName("p1")); return err }(),
		"count status":      mw(WithCountStatus(func(int) bool { return true })),
		"no policy applies": selectErr(),
		"route": func() error {
			_, err := NewRoutes(Route{Pattern: "GET /r", Policies: []Policy{{Name: "p1", Key: key}}})
			return err
		}(),
	}
	for name, err := range errs {
		msg := fmt.Sprint(err)
		rest, _ := strings.CutPrefix(msg, `route "GET /r": `)
		if err == nil || !strings.HasPrefix(rest, `policy "p`) || strings.Index(rest, "floodgate:") < strings.Index(rest, `": `) {
			t.Errorf("%s: %q; want `[route \"…\": ]policy \"…\": floodgate: …`", name, msg)
		}
	}
}
