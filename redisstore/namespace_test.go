package redisstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// TestPoliciesWithOnePrefixRefused (issue 18 item 7, second round): two
// Redis limiters built separately with the default prefix (or one
// prefix) write the same keys, so NewPolicySelector, which checked only
// for one Go value in two policies, accepted a "user" and an "ip" policy
// that shared state: a user named 198.51.100.10 spent that address's
// quota, and its owner's first request got 429. Now the selector, and a
// route table, refuse them with an error that names both policies, the
// keys and the fix; with a prefix each, the owner gets 200. Limiters of
// different algorithms write different keys and are accepted together.
func TestPoliciesWithOnePrefixRefused(t *testing.T) {
	addr := redistest.Shared(t)
	user, err := floodgate.KeyByHeader("X-User")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := floodgate.KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	rate := floodgate.PerHour(3)
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			for _, opts := range [][]redisstore.Option{nil, {redisstore.WithPrefix(p)}} {
				byUser := mustTokenBucket(t, c.s, rate, opts...)
				byIP := mustTokenBucket(t, c.s, rate, opts...)
				sel, err := floodgate.NewPolicySelector(
					floodgate.Policy{Name: "user", Limiter: byUser, Key: user},
					floodgate.Policy{Name: "ip", Limiter: byIP, Key: ip},
				)
				if err == nil {
					t.Fatalf("prefix %v: built; the address's owner then gets %d on its first request", opts, squatAddress(t, sel))
				}
				msg := err.Error()
				for _, want := range []string{`"user"`, `"ip"`, ":{*}:tb", "WithPrefix"} {
					if !errors.Is(err, floodgate.ErrInvalidOption) || !strings.Contains(msg, want) {
						t.Fatalf("err = %v; want ErrInvalidOption naming both policies, the keys and the fix (%s)", err, want)
					}
				}
				_, err = floodgate.NewRoutes(
					floodgate.Route{Pattern: "GET /a", Policies: []floodgate.Policy{{Name: "ip", Limiter: byIP, Key: ip}}},
					floodgate.Route{Pattern: "POST /b", Policies: []floodgate.Policy{{Name: "user", Limiter: byUser, Key: user}}},
				)
				if !errors.Is(err, floodgate.ErrInvalidOption) {
					t.Fatalf("prefix %v across routes: err = %v, want ErrInvalidOption", opts, err)
				}
			}
			sel, err := floodgate.NewPolicySelector(
				floodgate.Policy{Name: "user", Limiter: mustTokenBucket(t, c.s, rate, redisstore.WithPrefix(p+":user")), Key: user},
				floodgate.Policy{Name: "ip", Limiter: mustTokenBucket(t, c.s, rate, redisstore.WithPrefix(p+":ip")), Key: ip},
			)
			if err != nil {
				t.Fatalf("a prefix each: %v", err)
			}
			if code := squatAddress(t, sel); code != http.StatusOK {
				t.Fatalf("a prefix each: the address's owner got %d on its first request", code)
			}
			counter, err := redisstore.NewSlidingCounter(c.s, rate, redisstore.WithPrefix(p+":mixed"))
			if err != nil {
				t.Fatal(err)
			}
			sel, err = floodgate.NewPolicySelector(
				floodgate.Policy{Name: "user", Limiter: mustTokenBucket(t, c.s, rate, redisstore.WithPrefix(p+":mixed")), Key: user},
				floodgate.Policy{Name: "ip", Limiter: counter, Key: ip},
			)
			if err != nil {
				t.Fatalf("a token bucket and a sliding counter with one prefix (keys :tb and :sc): %v", err)
			}
			if code := squatAddress(t, sel); code != http.StatusOK {
				t.Fatalf("a token bucket and a sliding counter with one prefix: the address's owner got %d on its first request", code)
			}
		})
	}
}

// squatAddress spends the quota of 198.51.100.10 as a user of that name,
// three times from another address, then returns the status its owner's
// first request gets.
func squatAddress(t *testing.T, sel *floodgate.PolicySelector) int {
	t.Helper()
	mw, err := floodgate.NewPolicyMiddleware(sel)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	owner := "198.51.100.10"
	for range 3 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.RemoteAddr = "203.0.113.66:1"
		r.Header.Set("X-User", owner)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = owner + ":1"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code
}

// TestAllWithOnePrefixRefused: the README's "10 a minute and 100 an hour
// together" on Redis, both token buckets with the default prefix, wrote
// one key under two rates' rules and allowed 2 requests of 20 at once
// instead of 10, an honest user locked out. All now refuses the pair,
// naming the keys and the fix; with a prefix each it allows exactly 10.
func TestAllWithOnePrefixRefused(t *testing.T) {
	addr := redistest.Shared(t)
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			for _, opts := range [][]redisstore.Option{nil, {redisstore.WithPrefix(p)}} {
				_, err := floodgate.All(mustTokenBucket(t, c.s, floodgate.PerMinute(10), opts...),
					mustTokenBucket(t, c.s, floodgate.PerHour(100), opts...))
				if !errors.Is(err, floodgate.ErrInvalidOption) || !strings.Contains(err.Error(), ":{*}:tb") || !strings.Contains(err.Error(), "WithPrefix") {
					t.Fatalf("prefix %v: err = %v; want ErrInvalidOption naming the keys and the fix", opts, err)
				}
			}
			both, err := floodgate.All(
				mustTokenBucket(t, c.s, floodgate.PerMinute(10), redisstore.WithPrefix(p+":min"), patient),
				mustTokenBucket(t, c.s, floodgate.PerHour(100), redisstore.WithPrefix(p+":hour"), patient))
			if err != nil {
				t.Fatal(err)
			}
			allowed := 0
			for range 20 {
				d, err := both.AllowN(context.Background(), "alice", 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					allowed++
				}
			}
			if allowed != 10 {
				t.Fatalf("All(10/min, 100/h), a prefix each: %d of 20 allowed at once, want 10", allowed)
			}
		})
	}
}

// TestNamespaces: each limiter's Namespace is the pattern of its keys:
// the prefix and the algorithm's suffix, and nothing of its rate.
func TestNamespaces(t *testing.T) {
	s := clients(t, redistest.Shared(t))[0].s
	rate := floodgate.PerMinute(5)
	cases := []struct {
		l    floodgate.Limiter
		want string
	}{
		{mustTokenBucket(t, s, rate), `redis keys "floodgate:{*}:tb"`},
		{mustTokenBucket(t, s, floodgate.PerHour(1), redisstore.WithPrefix("fg:a")), `redis keys "fg:a:{*}:tb"`},
		{mustTokenBucket(t, s, rate, redisstore.WithIntervalRefill()), `redis keys "floodgate:{*}:tbi"`},
		{algos[1].mustNew(t, s, rate), `redis keys "floodgate:{*}:log"`},
		{algos[2].mustNew(t, s, rate, redisstore.WithPrefix("x")), `redis keys "x:{*}:sc"`},
		{algos[2].mustNew(t, s, rate, redisstore.WithPrefix(redisstore.DefaultPrefix)), `redis keys "floodgate:{*}:sc"`},
		{mustInFlight(t)(redisstore.NewInFlight(s, 3)), `redis keys "floodgate:{*}:if"`},
		{mustInFlight(t)(redisstore.NewServiceInFlight(s, 3, redisstore.WithPrefix("svc"))), `redis keys "svc:{*}:if"`},
	}
	for _, c := range cases {
		if got := c.l.(floodgate.Namespacer).Namespace(); got != c.want {
			t.Errorf("Namespace() = %s, want %s", got, c.want)
		}
	}
}

func mustTokenBucket(t *testing.T, s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) *redisstore.TokenBucket {
	t.Helper()
	l, err := redisstore.NewTokenBucket(s, r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustInFlight(t *testing.T) func(*redisstore.InFlight, error) *redisstore.InFlight {
	return func(l *redisstore.InFlight, err error) *redisstore.InFlight {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
}
