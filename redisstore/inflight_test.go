package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// The decisions of an in-flight limit on Redis, step by step, as in
// memory: slots taken and given back per key, a cost above the limit,
// the service-wide limit marked Overloaded.
func TestInFlightSteps(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			l, err := redisstore.NewInFlight(c.s, 3, patient, redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			steps := []struct {
				key       string
				n         int // negative: release -n
				allowed   bool
				remaining int
			}{
				{"ann", 2, true, 1},
				{"ann", 2, false, 1},
				{"ann", 1, true, 0},
				{"bob", 3, true, 0},
				{"ann", -2, true, 2},
				{"ann", 0, true, 2},
				{"ann", 2, true, 0},
				{"ann", -5, true, 3}, // more than held: all of it
			}
			for i, s := range steps {
				if s.n < 0 {
					if err := l.ReleaseN(ctx, s.key, -s.n, 10*time.Millisecond); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					s.n = 0
				}
				d, err := l.AllowN(ctx, s.key, s.n)
				if err != nil || d.Allowed != s.allowed || d.Remaining != s.remaining || d.Overloaded || d.Limit != 3 {
					t.Fatalf("step %d (%s %d): %+v %v; want allowed %v, remaining %d", i, s.key, s.n, d, err, s.allowed, s.remaining)
				}
			}
			if _, err := l.AllowN(ctx, "ann", 4); !errors.Is(err, floodgate.ErrCostExceedsLimit) {
				t.Errorf("cost 4 of 3: %v", err)
			}
			svc, err := redisstore.NewServiceInFlight(c.s, 1, patient, redisstore.WithPrefix(prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			if d, _ := svc.AllowN(ctx, "ann", 1); !d.Allowed {
				t.Fatal("service-wide: the first slot was denied")
			}
			if d, _ := svc.AllowN(ctx, "bob", 1); d.Allowed || !d.Overloaded || d.RetryAfter != time.Second {
				t.Errorf("service-wide, another key: %+v, want denied, Overloaded, retry after 1s", d)
			}
		})
	}
}

// Impossible configurations are refused.
func TestInFlightOptionsRefused(t *testing.T) {
	addr := redistest.Shared(t)
	c := clients(t, addr)[0]
	local, err := floodgate.NewInFlight(5)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]redisstore.Option{
		"fallback":        {redisstore.WithFallback(local)},
		"deny cache":      {redisstore.WithDenyCache(10)},
		"burst":           {redisstore.WithBurst(2)},
		"short lease":     {redisstore.WithSlotLease(10 * time.Millisecond)},
		"lease < 3 × RTT": {redisstore.WithSlotLease(200 * time.Millisecond)},
	} {
		if l, err := redisstore.NewInFlight(c.s, 5, opts...); !errors.Is(err, floodgate.ErrInvalidOption) || l != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := redisstore.NewTokenBucket(c.s, floodgate.PerSecond(1), redisstore.WithSlotLease(time.Second)); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("WithLease on a token bucket: %v", err)
	}
}

// 100 concurrent requests of one key against an in-flight limit of 5 on
// Redis, through the middleware of two instances (two limiters, as two
// processes would have): exactly 5 are in the handlers at once, 95 get
// 429, and when the 5 are done the next 5 get in.
func TestInFlightHundredAgainstFive(t *testing.T) {
	addr := redistest.Shared(t)
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			p := prefix(t)
			var handlers []http.Handler
			var in, peak atomic.Int64
			release, entered := make(chan struct{}), make(chan struct{}, 100)
			slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				n := in.Add(1)
				for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
				}
				entered <- struct{}{}
				<-release
				in.Add(-1)
			})
			for range 2 {
				l, err := redisstore.NewInFlight(c.s, 5, patient, redisstore.WithPrefix(p))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				mw, err := floodgate.NewMiddleware(l, floodgate.WithKeyFunc(floodgate.KeyByMethod()))
				if err != nil {
					t.Fatal(err)
				}
				handlers = append(handlers, mw(slow))
			}
			for round := 0; round < 2; round++ {
				codes := make(chan int, 100)
				var wg sync.WaitGroup
				for i := range 100 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rec := httptest.NewRecorder()
						handlers[i%2].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
						codes <- rec.Code
					}()
				}
				denied := 0
				for range 95 {
					if <-codes == http.StatusTooManyRequests {
						denied++
					}
				}
				for range 5 {
					<-entered
				}
				if denied != 95 || in.Load() != 5 {
					t.Fatalf("round %d: %d denied with %d in the handlers; want 95 with 5", round, denied, in.Load())
				}
				for range 5 {
					release <- struct{}{}
				}
				wg.Wait()
			}
			if peak.Load() != 5 {
				t.Errorf("peak in the handlers %d, want 5", peak.Load())
			}
		})
	}
}

// The environment of the holder process (TestInFlightHolderProcess).
const (
	envHolder     = "FLOODGATE_TEST_INFLIGHT_HOLDER"
	envHolderAt   = "FLOODGATE_TEST_INFLIGHT_AT"
	envHolderLock = "FLOODGATE_TEST_INFLIGHT_PREFIX"
)

// holderLease is the lease of the crash test: long in real time, so that
// no renewal runs, and passed on the test's clock instead.
const holderLease = time.Hour

// TestInFlightHolderProcess is not a test: run by
// TestInFlightCrashedHolderSlotsComeBack as a second process, it takes the
// 5 slots of key "k" on the Redis of REDIS_ADDR at the time it is given,
// says so, and waits to be killed.
func TestInFlightHolderProcess(t *testing.T) {
	if os.Getenv(envHolder) != "1" {
		t.Skip("the holder process of TestInFlightCrashedHolderSlotsComeBack")
	}
	at, err := strconv.ParseInt(os.Getenv(envHolderAt), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	still := func() time.Time { return time.UnixMicro(at) }
	c := goRedis(t, redistest.Shared(t))
	l, err := redisstore.NewInFlight(c.s, 5, patient, redisstore.WithPrefix(os.Getenv(envHolderLock)),
		redisstore.WithClock(still), redisstore.WithSlotLease(holderLease))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := l.AllowN(context.Background(), "k", 5); err != nil || !d.Allowed {
		t.Fatalf("holder: %+v %v", d, err)
	}
	os.Stdout.WriteString("held\n")
	select {} // until killed
}

// A holder that crashes — a second process killed with SIGKILL while it
// holds all 5 slots of a key — loses them within its lease: denied until
// the lease runs out (checked a microsecond before), allowed from then on.
func TestInFlightCrashedHolderSlotsComeBack(t *testing.T) {
	addr := redistest.Shared(t)
	p := prefix(t)
	clock := &fakeClock{t0}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInFlightHolderProcess$", "-test.v")
	cmd.Env = append(os.Environ(), envHolder+"=1", "REDIS_ADDR="+addr,
		envHolderAt+"="+strconv.FormatInt(t0.UnixMicro(), 10), envHolderLock+"="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !waitForLine(out, "held", 30*time.Second) {
		t.Fatal("the holder process never took its slots")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, c := range clients(t, addr) {
		l, err := redisstore.NewInFlight(c.s, 5, patient, redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithSlotLease(holderLease))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, at := range []time.Duration{0, holderLease / 2, holderLease - time.Microsecond} {
			clock.t = t0.Add(at)
			if d, err := l.AllowN(ctx, "k", 0); err != nil || d.Remaining != 0 {
				t.Fatalf("%s, %v after the holder took them: %+v %v; want all 5 slots held", c.name, at, d, err)
			}
		}
		l.Close()
	}
	clock.t = t0.Add(holderLease)
	l, err := redisstore.NewInFlight(clients(t, addr)[0].s, 5, patient, redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithSlotLease(holderLease))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if d, err := l.AllowN(context.Background(), "k", 5); err != nil || !d.Allowed {
		t.Fatalf("a lease after the crash: %+v %v; want the 5 slots back", d, err)
	}
}

// waitForLine reads r until a line equal to want, for at most d.
func waitForLine(r io.Reader, want string, d time.Duration) bool {
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == want {
				found <- true
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		return ok
	case <-time.After(d):
		return false
	}
}

// A holder that renews keeps its slots past the lease it took them with;
// one that stops renewing (Close, as a process that hangs or is cut off
// would) loses them when the renewed lease runs out, and no sooner. The
// renewals are made by hand on the test's clock: their timers run on real
// time, a third of an hour apart.
func TestInFlightRenewalKeepsSlotsUntilItStops(t *testing.T) {
	addr := redistest.Shared(t)
	c := goRedis(t, addr)
	clock := &fakeClock{t0}
	const lease = time.Hour
	p := prefix(t)
	newLimit := func() *redisstore.InFlight {
		l, err := redisstore.NewInFlight(c.s, 3, patient, redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, other := newLimit(), newLimit()
	ctx := context.Background()
	if d, err := holder.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("holder: %+v %v", d, err)
	}
	clock.t = t0.Add(lease * 9 / 10)
	holder.RenewNow("k") // the lease now runs to 1.9 leases
	clock.t = t0.Add(lease * 3 / 2)
	if d, _ := other.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatal("a renewed lease was lost at 1.5 leases")
	}
	_ = holder.Close()
	clock.t = t0.Add(lease*19/10 - time.Microsecond)
	if d, _ := other.AllowN(ctx, "k", 1); d.Allowed {
		t.Fatal("the slots came back before the renewed lease ran out")
	}
	clock.t = t0.Add(lease * 19 / 10)
	if d, err := other.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
		t.Fatalf("after the renewed lease: %+v %v; want the 3 slots back", d, err)
	}
	if holder.LostLeases() != 0 {
		t.Errorf("lost leases %d, want 0", holder.LostLeases())
	}
	holder.RenewNow("k") // the holder comes back after its lease: its slots are gone
	if holder.LostLeases() != 1 {
		t.Errorf("lost leases %d, want 1", holder.LostLeases())
	}
}
