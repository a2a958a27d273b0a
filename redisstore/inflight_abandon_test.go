package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// movingClock is a clock that background renewals may read while the test
// moves it: real time plus an offset the test adds to.
type movingClock struct {
	base time.Time
	real bool // advance with real time too
	off  atomic.Int64
}

func (c *movingClock) Now() time.Time {
	if c.real {
		return time.Now().Add(time.Duration(c.off.Load()))
	}
	return c.base.Add(time.Duration(c.off.Load()))
}

func (c *movingClock) add(d time.Duration) { c.off.Add(int64(d)) }

// How lateScripter fails the script call it is armed for.
const (
	passOn     = iota
	replyLate  // the script runs; its reply comes after the caller's deadline
	hangUp     // the script runs; the caller hangs up before its reply
	heldBack   // the call fails at once; the script runs later (runHeld)
	slowRandom // every call: now and then a reply slower than the deadline
)

// lateScripter passes every script call to the client it wraps. Armed
// with a mode, it fails the next call as that mode says: the decisions
// whose slot the script may have taken while the caller gave up.
type lateScripter struct {
	redisstore.Scripter
	mode   atomic.Int32 // one-shot, but slowRandom stays
	cancel context.CancelFunc
	held   chan func()
	calls  atomic.Int64 // calls passed on, held back ones when they run
	late   atomic.Int64 // replies delivered after the caller's deadline, or never
	// slow picks the calls slowRandom may delay: the decisions, not the
	// renewals, whose lateness would only test the lease's length.
	slow func(args []string) bool
	// sent records the arguments of every call passed on, when set.
	mu   sync.Mutex
	sent [][]string
	log  bool
}

func newLateScripter(s redisstore.Scripter) *lateScripter {
	return &lateScripter{Scripter: s, held: make(chan func(), 1)}
}

func (l *lateScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return l.do(ctx, args, func(ctx context.Context) ([]int64, error) { return l.Scripter.EvalSha(ctx, sha, keys, args) })
}

func (l *lateScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return l.do(ctx, args, func(ctx context.Context) ([]int64, error) { return l.Scripter.Eval(ctx, src, keys, args) })
}

func (l *lateScripter) do(ctx context.Context, args []string, run func(context.Context) ([]int64, error)) ([]int64, error) {
	mode := l.mode.Load()
	if mode == slowRandom {
		r, err := run(context.WithoutCancel(ctx))
		l.calls.Add(1)
		if errors.Is(err, redisstore.ErrNoScript) || !l.slow(args) || rand.IntN(10) != 0 {
			return r, err
		}
		select {
		case <-time.After(time.Duration(50+rand.IntN(100)) * time.Millisecond):
			return r, err
		case <-ctx.Done():
			l.late.Add(1)
			return nil, ctx.Err()
		}
	}
	if mode == passOn || !l.mode.CompareAndSwap(mode, passOn) {
		defer l.calls.Add(1)
		l.mu.Lock()
		if l.log {
			l.sent = append(l.sent, args)
		}
		l.mu.Unlock()
		return run(ctx)
	}
	if mode == heldBack {
		l.late.Add(1)
		l.held <- func() { _, _ = run(context.Background()); l.calls.Add(1) }
		return nil, context.DeadlineExceeded
	}
	r, err := run(context.WithoutCancel(ctx))
	l.calls.Add(1)
	if errors.Is(err, redisstore.ErrNoScript) {
		l.mode.Store(mode) // not run: stay armed for the EVAL that follows
		return r, err
	}
	l.late.Add(1)
	if mode == hangUp {
		l.cancel()
		return nil, context.Canceled
	}
	return nil, context.DeadlineExceeded
}

// runHeld runs the call held back, once the calls passed on reach after.
func (l *lateScripter) runHeld(t *testing.T, after int64) {
	t.Helper()
	waitUntil(t, "the abandoned decision's release", func() bool { return l.calls.Load() >= after })
	(<-l.held)()
}

// waitUntil polls cond for up to 10 s of real time: for work the limiter
// does in the background (a release sent at once), not for a clock.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A decision given up on after its script took a slot — its reply came
// after the decision timeout, or its caller hung up meanwhile — gives the
// slot back at once; one whose script ran only after the instance had
// given up (the take overtaken by its release) holds it until its own
// lease runs out, never renewed. Both on a busy key: the instance keeps a
// call running there and renews its slots every third of a lease
// throughout. Before, the instance's one record per key counted the
// abandoned slot with its own and renewed it with them: lost for as long
// as the key stayed busy.
func TestInFlightAbandonedSlotComesBack(t *testing.T) {
	addr := redistest.Shared(t)
	const lease = time.Hour // renewals by hand (RenewNow), on the test's clock
	for _, c := range clients(t, addr) {
		for _, mode := range []struct {
			name   string
			mode   int32
			atOnce bool
		}{{"reply late", replyLate, true}, {"hang-up", hangUp, true}, {"take after its release", heldBack, false}} {
			t.Run(c.name+"/"+mode.name, func(t *testing.T) {
				clock := &movingClock{base: t0}
				s := newLateScripter(c.s)
				p := prefix(t)
				busy, err := redisstore.NewInFlight(s, 3, patient, redisstore.WithPrefix(p),
					redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
				if err != nil {
					t.Fatal(err)
				}
				defer busy.Close()
				other, err := redisstore.NewInFlight(c.s, 3, patient, redisstore.WithPrefix(p),
					redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				ctx := context.Background()
				free := func() int {
					d, err := other.AllowN(ctx, "k", 0)
					if err != nil {
						t.Fatal(err)
					}
					return d.Remaining
				}
				if d, err := busy.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
					t.Fatalf("the running call: %+v %v", d, err)
				}
				callCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				s.cancel = cancel
				s.mode.Store(mode.mode)
				before := s.calls.Load()
				if d, err := busy.AllowN(callCtx, "k", 1); err == nil {
					t.Fatalf("the abandoned decision: %+v, no error", d)
				}
				if mode.mode == heldBack {
					s.runHeld(t, before+1)
					if got := free(); got != 1 {
						t.Fatalf("the overtaken take: %d slots free, want 1 (it took one)", got)
					}
				}
				if mode.atOnce {
					waitUntil(t, "the abandoned slot to come back", func() bool { return free() == 2 })
				}
				// The key stays busy: the running call's slots are renewed
				// every third of a lease, for two and a half leases.
				for step := time.Duration(0); step < lease*5/2; step += lease / 3 {
					clock.add(lease / 3)
					busy.RenewNow("k")
				}
				if got := free(); got != 2 {
					t.Fatalf("2.5 leases later, renewed throughout: %d slots free, want 2 (only the running call's taken)", got)
				}
				if got := busy.LostLeases(); got != 0 {
					t.Errorf("the running call's lease was lost %d times", got)
				}
				if err := busy.ReleaseN(ctx, "k", 1, time.Millisecond); err != nil {
					t.Fatal(err)
				}
				if got := free(); got != 3 {
					t.Fatalf("after the running call: %d slots free, want 3", got)
				}
			})
		}
	}
}

// inFlightLoadRun is how long TestInFlightNoSlotLostUnderLoad runs per
// client; FLOODGATE_INFLIGHT_SOAK=1m runs it that long.
func inFlightLoadRun(t *testing.T) time.Duration {
	if s := os.Getenv("FLOODGATE_INFLIGHT_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("FLOODGATE_INFLIGHT_SOAK: %v", err)
		}
		return d
	}
	return 3 * time.Second
}

// Two instances of an in-flight limit of 4 on one key, 16 callers, the
// default 100 ms decision timeout, one reply in ten delayed 50–150 ms
// (some past the timeout, after their script ran) and one caller in ten
// hanging up within 2 ms: never more than 4 calls inside, and no slot
// lost. One call holds a slot throughout, so the key stays busy and the
// first instance renews it every third of a lease; when the load
// stops, the clock moves on 2.5 leases with that call renewed, and every
// other slot must be free. Before, each abandoned decision whose script
// ran kept a slot in its instance's record, renewed with the busy call's.
func TestInFlightNoSlotLostUnderLoad(t *testing.T) {
	addr := redistest.Shared(t)
	// A lease of 1 s is renewed every 333 ms: ample for 100 ms round
	// trips, so that a lease lost to an overloaded machine (which
	// LostLeases would count) does not stand in for a slot lost by the
	// limiter.
	const max, lease, callers = 4, time.Second, 16
	run := inFlightLoadRun(t)
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := &movingClock{real: true}
			s := newLateScripter(c.s)
			// The take's arguments: now, its call, n, max, the lease in µs.
			leaseArg := strconv.FormatInt(lease.Microseconds(), 10)
			s.slow = func(args []string) bool { return len(args) == 6 && args[4] == leaseArg }
			p := prefix(t)
			var limits []*redisstore.InFlight
			for range 2 {
				l, err := redisstore.NewInFlight(s, max, redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				limits = append(limits, l)
			}
			ctx := context.Background()
			if d, err := limits[0].AllowN(ctx, "k", 1); err != nil || !d.Allowed {
				t.Fatalf("the long call: %+v %v", d, err)
			}
			s.mode.Store(slowRandom)
			var inside, peak, allowed, failed, hungUp atomic.Int64
			inside.Store(1)
			end := time.Now().Add(run)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := limits[i%2]
					for time.Now().Before(end) {
						callCtx, cancel := context.WithCancel(ctx)
						if rand.IntN(10) == 0 {
							time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
						}
						d, err := l.AllowN(callCtx, "k", 1)
						if callCtx.Err() != nil {
							hungUp.Add(1)
						}
						cancel()
						if err != nil {
							failed.Add(1)
							continue
						}
						if !d.Allowed {
							time.Sleep(time.Millisecond) // a client waiting to retry
							continue
						}
						allowed.Add(1)
						n := inside.Add(1)
						for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
						}
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
						inside.Add(-1)
						if err := l.ReleaseN(ctx, "k", 1, time.Millisecond); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%v: %d allowed, %d failed (%d replies after their deadline), %d hang-ups, peak %d inside, lost leases %d+%d",
				run, allowed.Load(), failed.Load(), s.late.Load(), hungUp.Load(), peak.Load(), limits[0].LostLeases(), limits[1].LostLeases())
			if peak.Load() > max {
				t.Errorf("%d calls inside at once, more than %d", peak.Load(), max)
			}
			if s.late.Load() == 0 {
				t.Fatal("no reply came after its deadline: the test did not abandon a decision")
			}
			s.mode.Store(passOn)
			for step := time.Duration(0); step < lease*5/2; step += lease / 4 {
				clock.add(lease / 4)
				limits[0].RenewNow("k")
			}
			d, err := limits[1].AllowN(ctx, "k", 0)
			if err != nil || d.Remaining != max-1 {
				t.Fatalf("2.5 leases after the load, the long call renewed: %+v %v; want %d free (only the long call's slot taken)", d, err, max-1)
			}
			if err := limits[0].ReleaseN(ctx, "k", 1, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			if d, _ := limits[1].AllowN(ctx, "k", 0); d.Remaining != max {
				t.Fatalf("after the long call: %d free, want %d", d.Remaining, max)
			}
		})
	}
}

// A call released in part keeps the rest of its slots, renewed; a call
// whose lease ran out is found gone by its release (a lost lease, counted
// once) and its release frees nothing of the others'.
func TestInFlightPartialReleaseAndLostLease(t *testing.T) {
	addr := redistest.Shared(t)
	const lease = time.Hour
	for _, c := range clients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			clock := &movingClock{base: t0}
			p := prefix(t)
			newLimit := func() *redisstore.InFlight {
				l, err := redisstore.NewInFlight(c.s, 5, patient, redisstore.WithPrefix(p),
					redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			a, b := newLimit(), newLimit()
			ctx := context.Background()
			free := func() int {
				d, err := b.AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				return d.Remaining
			}
			if d, err := a.AllowN(ctx, "k", 3); err != nil || !d.Allowed {
				t.Fatalf("take 3: %+v %v", d, err)
			}
			if err := a.ReleaseN(ctx, "k", 1, 0); err != nil || free() != 3 {
				t.Fatalf("released 1 of 3: %v, %d free; want 3", err, free())
			}
			clock.add(lease * 9 / 10)
			a.RenewNow("k")
			clock.add(lease / 2)
			if got := free(); got != 3 {
				t.Fatalf("the shrunk call, renewed, 1.4 leases later: %d free, want 3", got)
			}
			if err := a.ReleaseN(ctx, "k", 2, 0); err != nil || free() != 5 {
				t.Fatalf("released the other 2: %v, %d free; want 5", err, free())
			}
			// A call not renewed for a lease loses its slots: another
			// instance takes them, and the call's release frees none of
			// theirs.
			if d, _ := a.AllowN(ctx, "k", 2); !d.Allowed {
				t.Fatal("take 2 refused")
			}
			clock.add(lease)
			if d, _ := b.AllowN(ctx, "k", 5); !d.Allowed {
				t.Fatalf("a lease after: %+v; want all 5 slots back", d)
			}
			if err := a.ReleaseN(ctx, "k", 2, 0); err != nil || free() != 0 {
				t.Fatalf("the lost call's release: %v, %d free; want 0 (b holds all 5)", err, free())
			}
			if got := a.LostLeases(); got != 1 {
				t.Errorf("lost leases %d, want 1", got)
			}
		})
	}
}

// A decision forgets at most 100 expired calls, whatever a crashed
// instance held: its work is bounded, and the calls it has not forgotten
// yet still count (the safe side) until the next decisions do.
func TestInFlightExpiryWorkBounded(t *testing.T) {
	addr := redistest.Shared(t)
	c := goRedis(t, addr)
	const lease = time.Hour
	clock := &movingClock{base: t0}
	p := prefix(t)
	crashed, err := redisstore.NewInFlight(c.s, 300, patient, redisstore.WithPrefix(p),
		redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 250 {
		if d, err := crashed.AllowN(ctx, "k", 1); err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	_ = crashed.Close()
	other, err := redisstore.NewInFlight(c.s, 300, patient, redisstore.WithPrefix(p),
		redisstore.WithClock(clock.Now), redisstore.WithSlotLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	clock.add(lease)
	for i, want := range []int{150, 250, 300, 300} {
		if d, err := other.AllowN(ctx, "k", 0); err != nil || d.Remaining != want {
			t.Fatalf("report %d a lease after the crash: %+v %v; want %d free", i, d, err, want)
		}
	}
}

// The give-back of a decision given up on renews nothing: its round trip
// carries that call's record alone, however many calls the instance
// holds of the key, so that callers hanging up mid-decision again and
// again cost a small round trip each, not one the size of the key.
// Renewals still carry every call.
func TestInFlightGiveBackRenewsNothing(t *testing.T) {
	addr := redistest.Shared(t)
	c := goRedis(t, addr)
	s := newLateScripter(c.s)
	l, err := redisstore.NewServiceInFlight(s, 100, patient, redisstore.WithPrefix(prefix(t)),
		redisstore.WithSlotLease(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for range 50 {
		if d, err := l.AllowN(ctx, "", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	l.RenewNow("") // the first run of its script: EVALSHA, NOSCRIPT, EVAL
	s.mu.Lock()
	s.log = true
	s.mu.Unlock()
	for i := range 3 {
		s.mode.Store(replyLate)
		before := s.calls.Load()
		if _, err := l.AllowN(ctx, "", 1); err == nil {
			t.Fatalf("abandoned decision %d: no error", i)
		}
		waitUntil(t, "the give-back", func() bool { return s.calls.Load() > before+1 })
	}
	l.RenewNow("")
	s.mu.Lock()
	sent := s.sent
	s.log = false
	s.mu.Unlock()
	if len(sent) != 4 {
		for _, a := range sent {
			t.Logf("%q", a[:min(len(a), 8)])
		}
		t.Fatalf("%d round trips after the decisions given up on, want 3 give-backs and a renewal", len(sent))
	}
	for i, args := range sent[:3] {
		// now, lease, floor, r, g, a, then the records
		if len(args) != 7 || args[3] != "0" || args[5] != "1" {
			t.Errorf("give-back %d: %d arguments %q; want one record removed, none renewed", i, len(args), args[:min(len(args), 7)])
		}
	}
	if args := sent[3]; len(args) != 56 || args[3] != "50" {
		t.Errorf("the renewal: %d arguments, %q calls renewed; want 50", len(args), args[3])
	}
	if d, _ := l.AllowN(ctx, "", 0); d.Remaining != 50 {
		t.Errorf("%d free, want 50: the abandoned decisions' slots are back", d.Remaining)
	}
}
