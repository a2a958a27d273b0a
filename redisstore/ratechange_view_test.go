package redisstore_test

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// These tests hold issue 29's first finding: a conversion computed under
// one view of the rate must never be written under another. The scripts
// check it (prelude_rate.lua): a conversion names the version and rate it
// was computed for, and a decision under another view refuses it.

// hookScripter runs onReply after every reply of the Scripter it wraps,
// before the limiter reads it: a test steps in between a script's reply
// and the limiter's next round trip.
type hookScripter struct {
	redisstore.Scripter
	onReply func(r []int64)
}

func (h hookScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	r, err := h.Scripter.EvalSha(ctx, sha, keys, args)
	if err == nil {
		h.onReply(r)
	}
	return r, err
}

func (h hookScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	r, err := h.Scripter.Eval(ctx, src, keys, args)
	if err == nil {
		h.onReply(r)
	}
	return r, err
}

var week = 7 * 24 * time.Hour

// TestConversionNeverAppliedUnderNewerView: an instance converts a key
// under view v1 (the script replied with the key's state of v0), and
// before it sends the conversion another instance changes the rate
// again (v2) and the first one reads it. The conversion, computed for
// v1, must not be written under v2: the key that spent 10 of 10 a week
// gets no more under a change back to 10 a week, whatever v1 was.
func TestConversionNeverAppliedUnderNewerView(t *testing.T) {
	addr := redistest.Shared(t)
	r0 := floodgate.Rate{Limit: 10, Period: week}
	cases := []struct {
		alg string
		r1  floodgate.Rate
		how floodgate.Inherit
	}{
		// v1's conversion leaves 10 used of 20: 10 more under v1, and 5
		// more if stamped with v2's 10 a week.
		{"TokenBucket", floodgate.Rate{Limit: 20, Period: week}, floodgate.KeepUsed},
		// v1 scales 10 of 10 to 5 of 5: stamped with v2, 5 of 10.
		{"TokenBucket/IntervalRefill", floodgate.Rate{Limit: 5, Period: week}, floodgate.ScaleUsed},
		// v1's window is four weeks: stamped with v2's one-week windows,
		// its count lies in a window long past, and is forgotten.
		{"SlidingCounter", floodgate.Rate{Limit: 10, Period: 4 * week}, floodgate.KeepUsed},
		// The sliding log converts in its decision's script: there is no
		// round trip between a conversion and its write to step into.
	}
	for _, c := range cases {
		var alg func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error)
		for _, a := range changingAlgos {
			if a.name == c.alg {
				alg = a.new
			}
		}
		for _, cl := range clients(t, addr) {
			t.Run(c.alg+"/"+cl.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(time.Millisecond), patient}
				changer, err := alg(goRedis(t, addr).s, r0, opts...)
				mustNot(t, err)
				var armed, fired atomic.Bool
				var a changing
				hook := func(r []int64) {
					if len(r) < 2 || r[0] != -2 || !armed.CompareAndSwap(true, false) {
						return
					}
					// a has the key's state of v0, to convert under v1.
					// v2 is made now, and a reads it before it sends
					// its conversion.
					mustNot(t, changer.SetRate(context.Background(), floodgate.RateChange{Rate: r0, Inherit: c.how}))
					time.Sleep(2 * time.Millisecond) // a's refresh interval, not a refill: the clock is frozen
					mustAllowed(t, a, "other", 0, true)
					fired.Store(true)
				}
				a, err = alg(hookScripter{cl.s, hook}, r0, opts...)
				mustNot(t, err)
				// Far from the counters' origin (their creation), where
				// windows of a week and of four weeks have other numbers.
				clock.t = t0.Add(10 * week)
				for range 10 {
					mustAllowed(t, a, "k", 1, true)
				}
				mustNot(t, changer.SetRate(context.Background(), floodgate.RateChange{Rate: c.r1, Inherit: c.how}))
				time.Sleep(2 * time.Millisecond)   // a's refresh interval
				mustAllowed(t, a, "warm", 0, true) // a reads v1
				if a.Rate() != c.r1 {
					t.Fatalf("a decides under %v, want v1's %v", a.Rate(), c.r1)
				}
				armed.Store(true)
				d, err := a.AllowN(context.Background(), "k", 1)
				mustNot(t, err)
				if !fired.Load() {
					t.Fatal("the decision met no state to convert: the test did not test")
				}
				if a.Rate() != r0 {
					t.Fatalf("a decides under %v after v2, want %v", a.Rate(), r0)
				}
				if d.Allowed || d.Remaining != 0 {
					t.Fatalf("the key that spent 10 of 10 a week, back at 10 a week after v1 = %v: %+v; want denied, 0 remaining", c.r1, d)
				}
			})
		}
	}
}

// TestRateFlipsUnderLoad is the outside check's shape: one instance
// flips the limit between 10 and 4 (and, for the windows, the period
// between a week and a day) under KeepUsed, while two others, one per
// client, decide 200 keys from eight goroutines at a frozen clock. Under
// KeepUsed whatever a key spent stays spent, so no key is ever allowed
// more than 10, and every key tried often enough gets at least 4.
func TestRateFlipsUnderLoad(t *testing.T) {
	addr := redistest.Shared(t)
	rates := map[string][2]floodgate.Rate{
		"limit":  {{Limit: 10, Period: week}, {Limit: 4, Period: week}},
		"period": {{Limit: 10, Period: week}, {Limit: 4, Period: 24 * time.Hour}},
	}
	for _, alg := range changingAlgos {
		for what, flip := range rates {
			t.Run(alg.name+"/"+what, func(t *testing.T) {
				seed := time.Now().UnixNano()
				clock := &fakeClock{t0}
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(2 * time.Millisecond), patient}
				changer, err := alg.new(goRedis(t, addr).s, flip[0], opts...)
				mustNot(t, err)
				var deciders []changing
				for _, c := range clients(t, addr) {
					l, err := alg.new(c.s, flip[0], opts...)
					mustNot(t, err)
					deciders = append(deciders, l)
				}
				const keys = 200
				var allowed, tries [keys]atomic.Int64
				var failed atomic.Int64
				var firstErr atomic.Value
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for g := range 8 {
					l := deciders[g%2]
					rng := rand.New(rand.NewSource(seed + int64(g)))
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							k := rng.Intn(keys)
							d, err := l.AllowN(context.Background(), fmt.Sprint("k", k), 1)
							tries[k].Add(1)
							switch {
							case err != nil:
								failed.Add(1)
								firstErr.CompareAndSwap(nil, err)
							case d.Allowed:
								allowed[k].Add(1)
							}
						}
					}()
				}
				for i := range 200 {
					mustNot(t, changer.SetRate(context.Background(), floodgate.RateChange{Rate: flip[(i+1)%2]}))
				}
				close(stop)
				wg.Wait()
				over, short := 0, 0
				for k := range keys {
					switch n := allowed[k].Load(); {
					case n > 10:
						over++
						t.Errorf("key %d: %d allowed, at most 10 under KeepUsed (seed %d)", k, n, seed)
					case n < 4 && tries[k].Load() >= 4:
						short++
					}
				}
				if failed.Load() != 0 {
					t.Errorf("%d decisions failed, the first: %v", failed.Load(), firstErr.Load())
				}
				if short > 0 {
					t.Errorf("%d keys tried 4 times or more got fewer than 4 (seed %d)", short, seed)
				}
				if over > 0 {
					t.Errorf("%d of %d keys over 10 (seed %d)", over, keys, seed)
				}
			})
		}
	}
}

// tamperScripter rewrites the arguments of every decision script that
// carries a conversion, before it is sent.
type tamperScripter struct {
	redisstore.Scripter
	tamper func(args []string)
}

func (s tamperScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if strings.Contains(keys[0], "{") { // a client's key: not the rate record
		s.tamper(args)
	}
	return s.Scripter.EvalSha(ctx, sha, keys, args)
}

func (s tamperScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	if strings.Contains(keys[0], "{") {
		s.tamper(args)
	}
	return s.Scripter.Eval(ctx, src, keys, args)
}

// TestScriptRefusesConversionOfAnotherView holds the scripts' own check,
// whatever the client does: a decision whose conversion was computed for
// view v1 but which is sent as a decision under v2 (its version and
// suffix rewritten on the way) is refused by the script, every time, and
// the key's state is left as it was, never stamped with v2.
func TestScriptRefusesConversionOfAnotherView(t *testing.T) {
	addr := redistest.Shared(t)
	cases := []struct {
		alg    string
		suffix string // the key's suffix in Redis
		ver    int    // index of the version argument; the suffix, expect and with follow
	}{
		{"TokenBucket", "tb", 8},
		{"TokenBucket/IntervalRefill", "tbi", 6},
		{"SlidingCounter", "sc", 6},
	}
	for _, c := range cases {
		var alg func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error)
		for _, a := range changingAlgos {
			if a.name == c.alg {
				alg = a.new
			}
		}
		for _, cl := range clients(t, addr) {
			t.Run(c.alg+"/"+cl.name, func(t *testing.T) {
				clock := &fakeClock{t0}
				p := prefix(t)
				opts := []redisstore.Option{redisstore.WithPrefix(p), redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Millisecond), patient}
				var tampered atomic.Int64
				l, err := alg(tamperScripter{cl.s, func(args []string) {
					if len(args) <= c.ver+3 || args[c.ver+2] == "" {
						return
					}
					// "|v L P B" -> "|v+1 L P B": a decision under a view the
					// conversion was not computed for.
					var v, lim, per, burst int64
					if _, err := fmt.Sscanf(args[c.ver+1], "|%d %d %d %d", &v, &lim, &per, &burst); err != nil {
						t.Errorf("suffix %q: %v", args[c.ver+1], err)
						return
					}
					args[c.ver] = fmt.Sprint(v + 1)
					args[c.ver+1] = fmt.Sprintf("|%d %d %d %d", v+1, lim, per, burst)
					tampered.Add(1)
				}}, floodgate.PerHour(10), opts...)
				mustNot(t, err)
				for range 10 {
					mustAllowed(t, l, "k", 1, true)
				}
				key := p + ":{k}:" + c.suffix
				before := getKey(t, addr, key)
				mustNot(t, l.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(20)}))
				d, err := l.AllowN(context.Background(), "k", 1)
				if err != nil || d.Allowed || !d.Overloaded {
					// A busy denial, never an error fail-open would pass
					// (TestRateChurnNeverOpensTheGate).
					t.Fatalf("a decision sending a conversion of v1 as one of v2: %+v, %v; want refused by the script until the tries run out, then a busy denial", d, err)
				}
				if tampered.Load() == 0 {
					t.Fatal("no conversion was sent: the test did not test")
				}
				if after := getKey(t, addr, key); after != before || before == "" {
					t.Fatalf("the state went from %q to %q: a conversion of another view was written", before, after)
				}
			})
		}
	}
}
