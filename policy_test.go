package floodgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// headerKey keys a request by a header, or ErrNoKey when it is absent.
func headerKey(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %s", ErrNoKey, name)
	}
}

func TestNewPolicySelectorRejects(t *testing.T) {
	lim := &fakeLimiter{}
	key := headerKey("X-A")
	tests := []struct {
		name     string
		policies []Policy
	}{
		{"none", nil},
		{"no name", []Policy{{Limiter: lim, Key: key}}},
		{"bad name", []Policy{{Name: "é", Limiter: lim, Key: key}}},
		{"no limiter", []Policy{{Name: "a", Key: key}}},
		{"no key", []Policy{{Name: "a", Limiter: lim}}},
		{"duplicate name", []Policy{{Name: "a", Limiter: lim, Key: key}, {Name: "a", Limiter: lim, Key: key}}},
	}
	for _, tt := range tests {
		if _, err := NewPolicySelector(tt.policies...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", tt.name, err)
		}
	}
}

func TestPolicySelectorSelect(t *testing.T) {
	boom := errors.New("boom")
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: &fakeLimiter{}, Key: headerKey("X-User")},
		Policy{Name: "broken", Limiter: &fakeLimiter{}, Key: func(r *http.Request) (string, error) {
			if r.Header.Get("X-Break") != "" {
				return "", boom
			}
			return "", ErrNoKey
		}},
		Policy{Name: "ip", Limiter: &fakeLimiter{}, Key: headerKey("X-Ip")},
	)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		headers map[string]string
		policy  string
		key     string
		err     error
	}{
		{map[string]string{"X-User": "u1", "X-Ip": "1.2.3.4"}, "user", "u1", nil},
		{map[string]string{"X-Ip": "1.2.3.4"}, "ip", "1.2.3.4", nil},
		{map[string]string{"X-Ip": "1.2.3.4", "X-Break": "1"}, "", "", boom},
		{map[string]string{}, "", "", ErrNoKey},
	}
	for _, tt := range tests {
		r := newRequest("GET", "/", "192.0.2.1:1")
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		p, key, err := sel.Select(r)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%v: err = %v, want %v", tt.headers, err, tt.err)
			}
			continue
		}
		if err != nil || p.Name != tt.policy || key != tt.key {
			t.Errorf("%v: got %q %q %v, want %q %q", tt.headers, p.Name, key, err, tt.policy, tt.key)
		}
	}
}

// Business code can use a selector without the middleware.
func TestPolicySelectorAllowN(t *testing.T) {
	clk := newFakeClock()
	byUser := mustTokenBucket(t, PerMinute(2), WithClock(clk.Now))
	byIP := mustTokenBucket(t, PerMinute(5), WithClock(clk.Now))
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: byUser, Key: headerKey("X-User")},
		Policy{Name: "ip", Limiter: byIP, Key: headerKey("X-Ip")},
	)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 3; i++ {
		r := newRequest("POST", "/", "192.0.2.1:1")
		r.Header.Set("X-User", "alice")
		name, d, err := sel.AllowN(r, 1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%v:%d", name, d.Allowed, d.Remaining))
	}
	r := newRequest("POST", "/", "192.0.2.1:1")
	r.Header.Set("X-Ip", "1.2.3.4")
	name, d, _ := sel.AllowN(r, 1)
	got = append(got, fmt.Sprintf("%s:%v:%d", name, d.Allowed, d.Remaining))
	want := "[user:true:1 user:true:0 user:false:0 ip:true:4]"
	if fmt.Sprint(got) != want {
		t.Fatalf("decisions %v, want %v", got, want)
	}
}

// Through the middleware, the selected policy's name and quota show in
// the headers.
func TestPolicyMiddlewareHeaders(t *testing.T) {
	clk := newFakeClock()
	byUser := mustTokenBucket(t, Rate{Limit: 5, Period: time.Minute}, WithClock(clk.Now))
	byIP := mustTokenBucket(t, Rate{Limit: 20, Period: time.Minute}, WithBurst(10), WithClock(clk.Now))
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: byUser, Key: headerKey("X-User")},
		Policy{Name: "ip", Limiter: byIP, Key: headerKey("X-Ip")},
	)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewPolicyMiddleware(sel)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(&countingHandler{})
	tests := []struct {
		header, value string
		policy, rl    string
		status        int
	}{
		{"X-User", "bob", `"user";q=5;w=60`, `"user";r=4;t=12`, 200},
		{"X-Ip", "1.2.3.4", `"ip";q=10;w=30`, `"ip";r=9;t=3`, 200},
		{"", "", "", "", 400}, // no policy applies: the client sent no key
	}
	for _, tt := range tests {
		r := newRequest("GET", "/", "192.0.2.1:1")
		if tt.header != "" {
			r.Header.Set(tt.header, tt.value)
		}
		w := serve(h, r)
		if w.Code != tt.status || w.Header().Get("RateLimit-Policy") != tt.policy || w.Header().Get("RateLimit") != tt.rl {
			t.Errorf("%s=%s: status %d, RateLimit-Policy %q, RateLimit %q; want %d %q %q", tt.header, tt.value,
				w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), tt.status, tt.policy, tt.rl)
		}
	}
	for _, o := range []MiddlewareOption{WithKeyFunc(headerKey("X")), WithPolicyName("x")} {
		if _, err := NewPolicyMiddleware(sel, o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("NewPolicyMiddleware with a per-policy option: %v, want ErrInvalidOption", err)
		}
	}
	if _, err := NewPolicyMiddleware(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil selector: %v", err)
	}
}

// rateLimiter is a fake limiter that reports a rate.
type rateLimiter struct {
	fakeLimiter
	rate Rate
}

func (l *rateLimiter) Rate() Rate { return l.rate }

func TestPolicyWindow(t *testing.T) {
	tests := []struct {
		rate  Rate
		limit int
		want  string
	}{
		{Rate{Limit: 10, Period: 10 * time.Minute}, 10, `"p";q=10;w=600`},
		{Rate{Limit: 20, Period: time.Minute}, 10, `"p";q=10;w=30`},                    // burst below the rate
		{Rate{Limit: 3, Period: time.Second}, 1, `"p";q=1;w=1`},                        // 333 ms, rounded up
		{Rate{Limit: 1, Period: 200 * 365 * 24 * time.Hour}, 1 << 20, `"p";q=1048576`}, // beyond int64: no w
		{Rate{}, 5, `"p";q=5`}, // an invalid rate is not advertised
	}
	for _, tt := range tests {
		p, err := newPolicy("p", &rateLimiter{rate: tt.rate}, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := p.policyField(tt.limit, p.rateOf("k")); got[0] != tt.want {
			t.Errorf("rate %v, limit %d: %q, want %q", tt.rate, tt.limit, got, tt.want)
		}
		if again, _ := p.policyField(tt.limit, p.rateOf("k")); again[0] != tt.want {
			t.Errorf("cached value %q", again)
		}
	}
}

// A misconfigured key function stops the selection even when its error
// also says ErrNoKey: falling through to a weaker policy would hide it.
// Errors carry the name of the policy whose key function failed.
func TestPolicySelectorStopsAtMisconfiguration(t *testing.T) {
	both := func(*http.Request) (string, error) {
		return "", fmt.Errorf("%w (%w): outside the mux", ErrNoKey, ErrInvalidOption)
	}
	sel, err := NewPolicySelector(
		Policy{Name: "route", Limiter: &fakeLimiter{}, Key: both},
		Policy{Name: "ip", Limiter: &fakeLimiter{}, Key: headerKey("X-Ip")},
	)
	if err != nil {
		t.Fatal(err)
	}
	r := newRequest("GET", "/", "192.0.2.1:1")
	r.Header.Set("X-Ip", "1.2.3.4")
	c := sel.sel.Call(r)
	if err := c.Err; !errors.Is(err, ErrInvalidOption) || c.Policy() != "route" || !strings.Contains(err.Error(), `policy "route"`) {
		t.Fatalf("selected %q, %v: want the misconfiguration of policy route", c.Policy(), c.Err)
	}
	sel, err = NewPolicySelector(
		Policy{Name: "user", Limiter: &fakeLimiter{}, Key: headerKey("X-User")},
		Policy{Name: "ip", Limiter: &fakeLimiter{}, Key: headerKey("X-Ip")},
	)
	if err != nil {
		t.Fatal(err)
	}
	c = sel.sel.Call(newRequest("GET", "/", "192.0.2.1:1"))
	if err := c.Err; !errors.Is(err, ErrNoKey) || c.Policy() != "ip" || !strings.Contains(err.Error(), `policy "ip"`) {
		t.Fatalf("no key: %q, %v: want ErrNoKey under the last policy tried", c.Policy(), c.Err)
	}
}

// TestJoinKeysFor: the generic join encodes as JoinKeys does, so that no
// component can forge a boundary, for a transport's own call type.
func TestJoinKeysFor(t *testing.T) {
	type call struct{ a, b string }
	first := func(c call) (string, error) { return c.a, nil }
	second := func(c call) (string, error) {
		if c.b == "" {
			return "", ErrNoKey
		}
		return c.b, nil
	}
	join, err := JoinKeysFor(first, second)
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := join(call{"ab", "c"})
	k2, _ := join(call{"a", "bc"})
	if k1 != "2:ab1:c" || k2 != "1:a2:bc" {
		t.Errorf("keys %q, %q; want 2:ab1:c and 1:a2:bc", k1, k2)
	}
	if _, err := join(call{"a", ""}); !errors.Is(err, ErrNoKey) {
		t.Errorf("component error %v does not wrap ErrNoKey", err)
	}
	for _, fns := range [][]func(call) (string, error){nil, {first, nil}} {
		if f, err := JoinKeysFor(fns...); f != nil || !errors.Is(err, ErrInvalidOption) {
			t.Errorf("JoinKeysFor(%d fns, a nil one?) = %v, %v; want ErrInvalidOption", len(fns), f != nil, err)
		}
	}
}

// A type embedding an in-memory limiter gets its unexported allowN with
// it; these override AllowN to refuse everything, and count their calls.
type (
	refusingBucket struct {
		*TokenBucket
		calls *int
	}
	refusingLog struct {
		*SlidingLog
		calls *int
	}
	refusingCounter struct {
		*SlidingCounter
		calls *int
	}
)

func (l refusingBucket) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return refuse(l.TokenBucket, l.calls, ctx, key, n)
}

func (l refusingLog) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return refuse(l.SlidingLog, l.calls, ctx, key, n)
}

func (l refusingCounter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return refuse(l.SlidingCounter, l.calls, ctx, key, n)
}

func refuse(l Limiter, calls *int, ctx context.Context, key string, n int) (Decision, error) {
	*calls++
	d, err := l.AllowN(ctx, key, n)
	d.Allowed = false
	return d, err
}

// TestMiddlewareCallsAnEmbeddersAllowN: the gate reaches the in-memory
// limiters' allowN directly (policy.decide), but a type that embeds one
// and has an AllowN of its own is decided by that AllowN, as any
// Limiter is: here every request is refused, once each.
func TestMiddlewareCallsAnEmbeddersAllowN(t *testing.T) {
	r := Rate{Limit: 10, Period: time.Minute}
	tb, err := NewTokenBucket(r)
	if err != nil {
		t.Fatal(err)
	}
	log, err := NewSlidingLog(r)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := NewSlidingCounter(r)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	for _, l := range []Limiter{refusingBucket{tb, &calls}, refusingLog{log, &calls}, refusingCounter{sc, &calls}} {
		calls = 0
		h, err := NewMiddleware(l)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 3; i++ {
			w := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.1:1234"
			h(okHandler).ServeHTTP(w, req)
			if w.Code != http.StatusTooManyRequests || calls != i {
				t.Fatalf("%T, request %d: status %d after %d AllowN calls; want 429 after %d", l, i, w.Code, calls, i)
			}
		}
	}
}
