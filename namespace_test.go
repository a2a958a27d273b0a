package floodgate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

// remoteStore stands for a store outside the process, such as Redis: the
// state of key k of a limiter in namespace ns lives under ns+k, whatever
// Go value the limiter is.
type remoteStore struct {
	mu   sync.Mutex
	used map[string]int
}

// remoteLimiter allows limit units per key in remoteStore, forever, and
// reports its namespace as a Redis limiter does.
type remoteLimiter struct {
	store *remoteStore
	ns    string
	limit int
}

func newRemote(store *remoteStore, ns string, limit int) *remoteLimiter {
	return &remoteLimiter{store: store, ns: ns, limit: limit}
}

func (l *remoteLimiter) Namespace() string { return "remote " + l.ns }

func (l *remoteLimiter) AllowN(_ context.Context, key string, n int) (Decision, error) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.store.used == nil {
		l.store.used = map[string]int{}
	}
	used := l.store.used[l.ns+key]
	if used+n > l.limit {
		return Decision{Limit: l.limit, Remaining: l.limit - used, RetryAfter: 1}, nil
	}
	l.store.used[l.ns+key] = used + n
	return Decision{Allowed: true, Limit: l.limit, Remaining: l.limit - used - n}, nil
}

var _ Namespacer = (*remoteLimiter)(nil)

// TestNamespaceSharedAcrossPoliciesRefused (issue 18 item 7, second
// round): two limiter values of one namespace — two Redis limiters built
// with the same (or the default) key prefix — count every key in one
// place, as one limiter would, so a user named 198.51.100.10 spent that
// address's quota (its owner's first request got 429): the selector
// checked only for one Go value in two policies. Now it is refused, with
// an error that names both policies, the namespace and the fix; limiters
// of different namespaces are accepted.
func TestNamespaceSharedAcrossPoliciesRefused(t *testing.T) {
	store := &remoteStore{}
	user := mustKey(KeyByHeader("X-User"))
	ip := mustKeyByIP(t)
	for name, limiters := range map[string][2]Limiter{
		"two limiters":       {newRemote(store, "floodgate", 3), newRemote(store, "floodgate", 3)},
		"inside a Composite": {mustAll(t, mustTokenBucket(t, PerMinute(10)), newRemote(store, "fg", 3)), newRemote(store, "fg", 3)},
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
			for _, want := range []string{`"user"`, `"ip"`, "remote f", "WithPrefix"} {
				if !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, want) {
					t.Fatalf("err = %v; want ErrInvalidOption naming both policies, the namespace and the fix (%s)", err, want)
				}
			}
		})
	}
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: newRemote(store, "fg:user", 3), Key: user},
		Policy{Name: "ip", Limiter: newRemote(store, "fg:ip", 3), Key: ip},
	)
	if err != nil {
		t.Fatalf("limiters of two namespaces: %v", err)
	}
	if code := squatAddress(t, sel); code != 200 {
		t.Fatalf("limiters of two namespaces: the address's owner got %d on its first request", code)
	}
}

// TestNamespaceAcrossRoutes: across routes, limiters of one namespace
// under policies of one name are one budget (accepted, as one limiter
// would be); under policies of different names they are refused.
func TestNamespaceAcrossRoutes(t *testing.T) {
	store := &remoteStore{}
	ip := mustKeyByIP(t)
	user := mustKey(KeyByHeader("X-User"))
	if _, err := NewRoutes(
		Route{Pattern: "GET /a", Policies: []Policy{{Name: "ip", Limiter: newRemote(store, "fg:ip", 60), Key: ip}}},
		Route{Pattern: "GET /b", Policies: []Policy{{Name: "ip", Limiter: newRemote(store, "fg:ip", 60), Key: ip}}},
	); err != nil {
		t.Errorf("one per-IP namespace across routes: %v", err)
	}
	_, err := NewRoutes(
		Route{Pattern: "GET /a", Policies: []Policy{{Name: "ip", Limiter: newRemote(store, "fg", 60), Key: ip}}},
		Route{Pattern: "POST /b", Policies: []Policy{{Name: "user", Limiter: newRemote(store, "fg", 3), Key: user}}},
	)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, `"GET /a"`) || !strings.Contains(msg, `"user"`) || !strings.Contains(msg, "remote fg") {
		t.Fatalf("err = %v; want ErrInvalidOption naming both routes, the policy and the namespace", err)
	}
}

// TestAllRefusesSharedState: All of two limiters that keep their state in
// one place counts each request twice in one state, by two limits' rules
// (on Redis, All of 10 a minute and 100 an hour with one prefix allowed 2
// requests of 20 instead of 10). One limiter given twice, two limiters of
// one namespace, and a limiter already inside a Composite given again are
// refused, with an error naming the two and the fix; distinct limiters
// are accepted and decide as before.
func TestAllRefusesSharedState(t *testing.T) {
	store := &remoteStore{}
	tb := mustTokenBucket(t, PerMinute(10))
	cases := map[string][]Limiter{
		"one limiter twice":      {tb, tb},
		"one namespace":          {newRemote(store, "floodgate", 10), newRemote(store, "floodgate", 100)},
		"inside a Composite":     {mustAll(t, tb, mustTokenBucket(t, PerHour(100))), tb},
		"namespace in Composite": {mustAll(t, newRemote(store, "fg", 10), tb), newRemote(store, "fg", 100)},
	}
	for name, limiters := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := All(limiters...)
			if err == nil {
				allowed := 0
				for range 20 {
					if d, _ := c.AllowN(context.Background(), "alice", 1); d.Allowed {
						allowed++
					}
				}
				t.Fatalf("built; it then allows %d of 20 requests at once (10 a minute)", allowed)
			}
			if msg := err.Error(); !errors.Is(err, ErrInvalidOption) || !strings.Contains(msg, "limiters 0 and 1") || !strings.Contains(msg, "its own") {
				t.Fatalf("err = %v; want ErrInvalidOption naming the two limiters and the fix", err)
			}
		})
	}
	c, err := All(newRemote(store, "fg:min", 10), newRemote(store, "fg:hour", 100))
	if err != nil {
		t.Fatalf("two namespaces: %v", err)
	}
	allowed := 0
	for range 20 {
		if d, _ := c.AllowN(context.Background(), "alice", 1); d.Allowed {
			allowed++
		}
	}
	if allowed != 10 {
		t.Fatalf("All(10, 100) in two namespaces allowed %d of 20, want 10", allowed)
	}
}
