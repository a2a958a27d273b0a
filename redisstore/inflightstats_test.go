package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// What the metrics adapters' Watch reads of a Redis in-flight limit, on a
// real server: the slots this instance's calls hold, by every key; a
// call whose lease ran out under it (the instance stopped renewing for
// longer than a lease, and Redis gave the slots to a later decision) is
// a lost lease once a renewal finds it gone, and no longer held, as
// Redis no longer counts it; and releasing the calls brings Held back to
// 0 with the lost lease still counted. A Held that kept the lost call
// would show slots the service no longer has; one that missed the live
// calls would hide a key at its limit.
func TestInFlightStatsHeldAndLost(t *testing.T) {
	addr := redistest.Shared(t)
	c := goRedis(t, addr)
	clock := &fakeClock{t0}
	const lease = time.Hour
	l, err := redisstore.NewInFlight(c.s, 3, patient, redisstore.WithPrefix(prefix(t)),
		redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	want := func(step string, held int, lost uint64) {
		t.Helper()
		got := l.InFlightStats()
		if w := (floodgate.InFlightStats{Held: held, Max: 3, Leased: true, LostLeases: lost}); got != w {
			t.Errorf("%s: %+v, want %+v", step, got, w)
		}
	}
	type call struct {
		key string
		n   int
	}
	want("before any call", 0, 0)
	ctx := context.Background()
	for _, c := range []call{{"k", 2}, {"j", 1}} {
		if d, err := l.AllowN(ctx, c.key, c.n); err != nil || !d.Allowed {
			t.Fatalf("%s takes %d: %+v %v", c.key, c.n, d, err)
		}
	}
	want("k holds 2, j 1", 3, 0)

	// No renewal for over a lease: Redis drops k's 2 slots at its next
	// decision, which gets all 3. Until a renewal tells it, the instance
	// still counts the 2 it believes it holds.
	clock.t = t0.Add(lease + time.Second)
	if d, err := l.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("k's expired slots are Redis's again: %+v %v; want 3 allowed", d, err)
	}
	want("k takes 3 anew", 6, 0)
	l.RenewNow("k") // finds the first call's record gone
	want("k's first lease lost", 4, 1)

	for _, c := range []call{{"k", 2}, {"k", 3}, {"j", 1}} {
		if err := l.ReleaseN(ctx, c.key, c.n, time.Millisecond); err != nil {
			t.Fatalf("release %s %d: %v", c.key, c.n, err)
		}
	}
	want("everything released", 0, 1)
}
