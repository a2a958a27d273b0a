package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// held returns the units l holds in leases now, from its counts: not
// those waiting to go back (ReturningUnits).
func held(l leased) int {
	s := l.LeaseStats()
	return int(s.LeasedUnits+s.LocalRefunds-s.LocalUnits-s.ReturnedUnits-s.StrandedUnits) - s.ReturningUnits
}

// allowUntilDenied allows single units of key through l until one is
// denied, and returns how many were allowed.
func allowUntilDenied(t *testing.T, l floodgate.Limiter, key string, most int) int {
	t.Helper()
	for i := 0; i <= most; i++ {
		d, err := l.AllowN(context.Background(), key, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return i
		}
	}
	t.Fatalf("more than %d units of %q allowed", most, key)
	return 0
}

// mustAllowN allows n units of key through l or fails t.
func mustAllowN(t *testing.T, l floodgate.Limiter, key string, n int, want bool) floodgate.Decision {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, n)
	if err != nil || d.Allowed != want {
		t.Fatalf("AllowN(%q, %d) = %+v, %v; want Allowed %v", key, n, d, err, want)
	}
	return d
}

// quarter lets a lease take up to a quarter of the capacity.
var quarter = redisstore.Lease{MaxShare: 4}

// leaseSetup is the usual scenario: k instances of a on one prefix and a
// frozen clock, leasing as lease says.
func leaseSetup(t *testing.T, a leaseAlgo, s redisstore.Scripter, k int, r floodgate.Rate, lease redisstore.Lease) ([]leased, *floodgatetest.Clock) {
	t.Helper()
	clock := floodgatetest.NewClock(leaseEpoch)
	return a.instances(t, k, s, r, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)), redisstore.WithLease(lease)), clock
}

// TestLeaseLostInstance: an instance that takes a lease and stops costs
// the key exactly the units it held, no more, and only until they would
// have refilled: the others then get what an exact limiter gives after
// the lost instance's allowed and held units.
func TestLeaseLostInstance(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 100, Period: 10 * time.Second}
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				insts, clock := leaseSetup(t, a, c.s, 2, rate, quarter)
				lost, other := insts[0], insts[1]
				for i := 0; i < 20; i++ {
					mustAllowN(t, lost, "k", 1, true)
				}
				h := held(lost)
				if h < 1 || h > rate.Limit/4 {
					t.Fatalf("the lost instance holds %d units, want 1..%d (MaxShare 4)", h, rate.Limit/4)
				}
				// The oracle: the lost instance's allowed and held units,
				// spent at the start.
				oracle := a.oracle(t, rate, clock)
				mustAllowN(t, oracle, "k", 20+h, true)
				for step := 0; step < 12; step++ {
					got := allowUntilDenied(t, other, "k", rate.Limit)
					want := allowUntilDenied(t, oracle, "k", rate.Limit)
					if got != want {
						t.Fatalf("step %d: the other instance got %d units, the exact limiter after the lost instance's %d+%d: %d",
							step, got, 20, h, want)
					}
					clock.Advance(1700 * time.Millisecond)
				}
			})
		}
	}
}

// TestLeaseTailGivenBackOnlyWhenLast: an instance gives the unused tail of
// its lease back with its next round trip only while no slot was handed
// out after the lease; otherwise the tail is stranded. Here A leases, a
// plain instance C takes most of the rest, B leases the last units, and
// A's next request, larger than its tail, is denied: had A's tail gone
// back, the bucket would refill before B's last unit runs out, and C's
// drain plus B's unit would pass the burst at one instant. Alone, A gets
// its tail back with its next lease.
func TestLeaseTailGivenBackOnlyWhenLast(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 64, Period: time.Hour}
	tick := rate.Period / time.Duration(rate.Limit)
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := floodgatetest.NewClock(leaseEpoch)
				p := prefix(t)
				insts := a.instances(t, 2, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(p),
					redisstore.WithLease(redisstore.Lease{MaxShare: 1}))
				plain := a.instances(t, 1, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(p))
				oracle := a.oracle(t, rate, clock)
				A, B, C := insts[0], insts[1], plain[0]
				allowed := 0
				take := func(l leased, n int) bool {
					d, err := l.AllowN(context.Background(), "k", n)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						allowed += n
						if od, _ := oracle.AllowN(context.Background(), "k", n); !od.Allowed {
							t.Fatalf("%d units allowed in all, %v in: over the limit", allowed, clock.Now().Sub(leaseEpoch))
						}
					}
					return d.Allowed
				}
				for i := 0; i < 4; i++ { // leases of 1, 2 and 4: slots 0..6, 3 held
					take(A, 1)
				}
				for i := 0; i < 54; i++ { // slots 7..60
					take(C, 1)
				}
				take(B, 1) // slot 61
				take(B, 1) // a lease of 2: slots 62 and 63, one held
				// A counter's lease never takes the key's last units (half
				// a lease: 32 here), so B decides them one at a time, and
				// A's tail goes back to the window it was counted in:
				// A's 4 units fit, exactly the 64 of the window.
				counter := a.name == "SlidingCounter"
				wantB := 1
				if counter {
					wantB = 0
				}
				if held(A) != 3 || held(B) != wantB {
					t.Fatalf("A holds %d, B %d; want 3 and %d", held(A), held(B), wantB)
				}
				if take(A, 4) != counter {
					t.Fatalf("A's 4 units: allowed %v, want %v", !counter, counter)
				}
				if s := A.LeaseStats(); a.name == "TokenBucket" && (s.ReturnedUnits != 0 || s.StrandedUnits != 3) {
					t.Errorf("A: %+v; want its 3 units stranded, none given back, as B leased after it", s)
				}
				clock.Advance(63 * tick) // B's held unit may be allowed until now
				for take(C, 1) {
				}
				for take(B, 1) {
				}
				t.Logf("allowed %d; A %+v; B %+v", allowed, A.LeaseStats(), B.LeaseStats())

				// Alone, the tail comes back: every unit gets used.
				alone, _ := leaseSetup(t, a, c.s, 1, rate, redisstore.Lease{MaxShare: 1})
				n := 0
				for i := 0; i < 4; i++ {
					mustAllowN(t, alone[0], "k", 1, true)
					n++
				}
				h := held(alone[0])
				mustAllowN(t, alone[0], "k", h+1, true)
				n += h + 1
				n += allowUntilDenied(t, alone[0], "k", rate.Limit)
				s := alone[0].LeaseStats()
				if n != rate.Limit || s.ReturnedUnits != uint64(h) || s.StrandedUnits != 0 {
					t.Fatalf("alone: %d allowed (want %d), %+v: want the %d tail units returned and none stranded", n, rate.Limit, s, h)
				}
			})
		}
	}
}

// TestLeaseRefundNeverFreesLeasedUnits: a refund through Redis gives back
// what was allowed, but never the units another instance holds in a
// lease: here B refunds the whole capacity while A holds a lease. A
// refund to the instance's own lease stays local.
func TestLeaseRefundNeverFreesLeasedUnits(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	ctx := context.Background()
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				insts, clock := leaseSetup(t, a, c.s, 3, rate, quarter)
				oracle := a.oracle(t, rate, clock)
				A, B, C := insts[0], insts[1], insts[2]
				for i := 0; i < 4; i++ {
					mustAllowN(t, A, "k", 1, true)
				}
				hA := held(A)
				mustAllowN(t, oracle, "k", 4, true)
				// A refunds one of its own: back into its lease.
				if err := A.RefundN(ctx, "k", 1); err != nil {
					t.Fatal(err)
				}
				if s := A.LeaseStats(); s.LocalRefunds != 1 || held(A) != hA+1 {
					t.Fatalf("A's refund: %+v, held %d; want it in A's lease", s, held(A))
				}
				_ = oracle.(floodgate.Refunder).RefundN(ctx, "k", 1)
				b := allowUntilDenied(t, B, "k", rate.Limit)
				mustAllowN(t, oracle, "k", b, true)
				// B gives everything back through Redis.
				if err := C.RefundN(ctx, "k", rate.Limit); err != nil {
					t.Fatal(err)
				}
				_ = oracle.(floodgate.Refunder).RefundN(ctx, "k", rate.Limit)
				got := allowUntilDenied(t, C, "k", rate.Limit) + allowUntilDenied(t, A, "k", rate.Limit)
				if od, _ := oracle.AllowN(ctx, "k", got); got > rate.Limit || !od.Allowed {
					t.Fatalf("after the refund %d units were allowed at one instant: over the limit of %d", got, rate.Limit)
				}
			})
		}
	}
}

// TestLeaseResetBound: a Reset forgets the key in Redis and drops the
// resetting instance's lease; another instance's lease keeps its units,
// so right after the reset the key can allow its capacity plus those,
// never more.
func TestLeaseResetBound(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	ctx := context.Background()
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				insts, _ := leaseSetup(t, a, c.s, 2, rate, quarter)
				A, B := insts[0], insts[1]
				for i := 0; i < 4; i++ {
					mustAllowN(t, A, "k", 1, true)
					mustAllowN(t, B, "k", 1, true)
				}
				hA, hB := held(A), held(B)
				if err := B.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				if held(B) != 0 {
					t.Fatalf("B still holds %d units after its Reset", held(B))
				}
				got := allowUntilDenied(t, B, "k", 2*rate.Limit) + allowUntilDenied(t, A, "k", 2*rate.Limit)
				if got != rate.Limit+hA {
					t.Fatalf("after B's Reset %d allowed, want the capacity %d plus A's %d held (B held %d)", got, rate.Limit, hA, hB)
				}
				if hA > rate.Limit/4 {
					t.Fatalf("A held %d, more than MaxShare allows", hA)
				}
			})
		}
	}
}

// TestLeaseEvictionStrandsNeverAdds: with room for two keys, a spray of
// keys evicts a hot key's lease: its units are stranded, counted, and
// never allowed; the exact limiter allows everything the instance did.
func TestLeaseEvictionStrandsNeverAdds(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	ctx := context.Background()
	for _, a := range leaseAlgos {
		t.Run(a.name, func(t *testing.T) {
			c := leaseGoRedis(t, addr)
			insts, clock := leaseSetup(t, a, c.s, 1, rate, redisstore.Lease{MaxShare: 4, MaxKeys: 2})
			l := insts[0]
			oracle := a.oracle(t, rate, clock)
			allowed := 0
			for round := 0; round < 10; round++ {
				for i := 0; i < 5; i++ {
					if d, _ := l.AllowN(ctx, "hot", 1); d.Allowed {
						allowed++
						if od, _ := oracle.AllowN(ctx, "hot", 1); !od.Allowed {
							t.Fatalf("round %d: %d allowed: over the limit", round, allowed)
						}
					}
				}
				for i := 0; i < 3; i++ {
					mustAllowN(t, l, fmt.Sprintf("spray-%d-%d", round, i), 1, true)
				}
			}
			s := l.LeaseStats()
			if s.Keys > 2 || s.StrandedUnits == 0 {
				t.Fatalf("%+v: want at most 2 keys and the evicted leases stranded", s)
			}
			if allowed+int(s.StrandedUnits) > rate.Limit {
				t.Fatalf("allowed %d + stranded %d > limit %d", allowed, s.StrandedUnits, rate.Limit)
			}
		})
	}
}

// TestLeaseOptions: WithLease is refused where it cannot work and with
// values out of range, wrapping ErrInvalidOption; zero fields take the
// defaults, which never lease on a small limit. LeaseStats().MaxKeys is
// the table's bound in lease mode and zero without it, which is how the
// metrics adapters tell a leasing limiter.
func TestLeaseOptions(t *testing.T) {
	var s redisstore.Scripter = goRedis(t, "127.0.0.1:1").s
	r := floodgate.PerMinute(10)
	bad := []struct {
		name string
		err  func() error
	}{
		{"sliding log", func() error {
			_, err := redisstore.NewSlidingLog(s, r, redisstore.WithLease(redisstore.Lease{}))
			return err
		}},
		{"interval refill", func() error {
			_, err := redisstore.NewTokenBucket(s, r, redisstore.WithIntervalRefill(), redisstore.WithLease(redisstore.Lease{}))
			return err
		}},
		{"twice", func() error {
			_, err := redisstore.NewTokenBucket(s, r, redisstore.WithLease(redisstore.Lease{}), redisstore.WithLease(redisstore.Lease{}))
			return err
		}},
		{"negative keys", func() error {
			_, err := redisstore.NewTokenBucket(s, r, redisstore.WithLease(redisstore.Lease{MaxKeys: -1}))
			return err
		}},
		{"negative horizon", func() error {
			_, err := redisstore.NewSlidingCounter(s, r, redisstore.WithLease(redisstore.Lease{Horizon: -time.Second}))
			return err
		}},
		{"day-long horizon", func() error {
			_, err := redisstore.NewSlidingCounter(s, r, redisstore.WithLease(redisstore.Lease{Horizon: 24 * time.Hour}))
			return err
		}},
		{"negative share", func() error {
			_, err := redisstore.NewTokenBucket(s, r, redisstore.WithLease(redisstore.Lease{MaxShare: -2}))
			return err
		}},
	}
	for _, b := range bad {
		if err := b.err(); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", b.name, err)
		}
	}
	for _, a := range leaseAlgos {
		l, err := a.redis(s, r, redisstore.WithLease(redisstore.Lease{}))
		if err != nil {
			t.Fatalf("%s with the default Lease: %v", a.name, err)
		}
		if got := l.LeaseStats(); got != (redisstore.LeaseStats{MaxKeys: redisstore.DefaultLeaseKeys}) {
			t.Errorf("%s with the default Lease: %+v, want zero counts and MaxKeys %d", a.name, got, redisstore.DefaultLeaseKeys)
		}
		if got := mustLeased(t, a, s, r, redisstore.WithLease(redisstore.Lease{MaxKeys: 77})).LeaseStats().MaxKeys; got != 77 {
			t.Errorf("%s with Lease.MaxKeys 77: LeaseStats().MaxKeys %d", a.name, got)
		}
		if got := mustLeased(t, a, s, r).LeaseStats(); got != (redisstore.LeaseStats{}) {
			t.Errorf("%s without WithLease: %+v, want all zero (MaxKeys 0: not leasing)", a.name, got)
		}
	}
}

// mustLeased builds a on s or fails t.
func mustLeased(t *testing.T, a leaseAlgo, s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) leased {
	t.Helper()
	l, err := a.redis(s, r, opts...)
	if err != nil {
		t.Fatalf("%s: %v", a.name, err)
	}
	return l
}

// TestLeaseMarkInBucketKey: a leasing bucket keeps its lease mark in the
// bucket's own key (one key per client: evicted and moved between Cluster
// nodes whole), and a plain limiter on the same prefix reads that key,
// shares the count, and keeps the mark when it writes: a refund must not
// free the slots of units the lease still holds
// (TestLeaseTokenBucketRefundKeepsMark).
func TestLeaseMarkInBucketKey(t *testing.T) {
	addr := redistest.Shared(t)
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	c := leaseGoRedis(t, addr)
	clock := floodgatetest.NewClock(leaseEpoch)
	p := prefix(t)
	lease, err := redisstore.NewTokenBucket(c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(p), redisstore.WithLease(quarter))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := redisstore.NewTokenBucket(c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(p))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		mustAllowN(t, lease, "k", 1, true)
	}
	fields := func() int {
		s, err := redistest.Bulk(addr, "GET", p+":{k}:tb")
		if err != nil {
			t.Fatal(err)
		}
		return len(strings.Fields(s))
	}
	if got := fields(); got != 4 {
		t.Fatalf("the bucket holds %d fields after a lease, want 4 (arrival time and mark)", got)
	}
	d := mustAllowN(t, plain, "k", 1, true)
	if want := rate.Limit - 4 - held(lease) - 1; d.Remaining != want {
		t.Fatalf("the plain limiter sees Remaining %d, want %d: the lease's units count", d.Remaining, want)
	}
	if got := fields(); got != 4 {
		t.Fatalf("the bucket holds %d fields after a plain decision, want 4 (the mark kept)", got)
	}
}
