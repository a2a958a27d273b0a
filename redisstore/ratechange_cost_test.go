package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// recordReads counts a limiter's reads of its rate record and, once armed, holds the first of them until
// released. A read is the record's key alone, with no arguments.
type recordReads struct {
	redisstore.Scripter
	reads   atomic.Int64
	armed   atomic.Bool
	held    chan struct{} // closed when the held read has begun
	release chan struct{}
}

func newRecordReads(s redisstore.Scripter) *recordReads {
	return &recordReads{Scripter: s, held: make(chan struct{}), release: make(chan struct{})}
}

func (r *recordReads) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	if len(keys) == 1 && len(args) == 0 && strings.Contains(keys[0], ":rate:") {
		r.reads.Add(1)
		if r.armed.CompareAndSwap(true, false) {
			close(r.held)
			<-r.release
		}
	}
	return r.Scripter.EvalSha(ctx, sha, keys, args)
}

// TestCostJudgedByTheKeysNewestRate: instance b read the rate (5 an hour)
// within its refresh interval when a raises it to 10 and decides key k
// under the raise; b's next call on k, of cost 8, is judged by the raise,
// not refused under the 5 b still holds (the concurrency checker's "a
// decision under a rate older than one already seen",
// Cluster/AnyCost/SlidingLog, seed 276215802625810: before the fix, b
// refused it with ErrCostExceedsLimit and Limit 5 without a round trip).
// A cost that fits b's view costs no read of the record; one above it
// costs one, and a cost above the raise too is refused with its Limit.
// With leased quota too.
func TestCostJudgedByTheKeysNewestRate(t *testing.T) {
	type variant struct {
		name string
		new  func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error)
	}
	variants := []variant{}
	for _, alg := range changingAlgos {
		variants = append(variants, variant{alg.name, alg.new})
	}
	variants = append(variants,
		variant{"Lease/TokenBucket", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
			return redisstore.NewTokenBucket(s, r, append(opts, redisstore.WithLease(redisstore.Lease{MaxShare: 2}))...)
		}},
		variant{"Lease/SlidingCounter", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (changing, error) {
			return redisstore.NewSlidingCounter(s, r, append(opts, redisstore.WithLease(redisstore.Lease{MaxShare: 2}))...)
		}})
	for where, pair := range pairs(t) {
		for _, alg := range variants {
			t.Run(where+"/"+alg.name, func(t *testing.T) {
				sa, sb := pair(t)
				rb := newRecordReads(sb)
				clock := &fakeClock{t0}
				p := prefix(t)
				a, err := alg.new(sa, floodgate.PerHour(5), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(20*time.Millisecond), patient)
				mustNot(t, err)
				// b's view stays within its refresh interval for the whole test.
				b, err := alg.new(rb, floodgate.PerHour(5), redisstore.WithPrefix(p), redisstore.WithClock(clock.Now),
					redisstore.WithRateRefresh(time.Hour), patient)
				mustNot(t, err)
				ctx := context.Background()
				mustAllowed(t, b, "warm", 1, true) // b reads the record (none): 5 an hour
				mustNot(t, a.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(10)}))
				if d := mustAllowed(t, a, "k", 1, true); d.Limit != 10 {
					t.Fatalf("a's AllowN(1) after its raise to 10 an hour: %+v; want Limit 10", d)
				}
				before := rb.reads.Load()
				mustAllowed(t, b, "j", 1, true)
				if got := rb.reads.Load() - before; got != 0 {
					t.Fatalf("a cost within b's view read the record %d times; want none", got)
				}
				d, err := b.AllowN(ctx, "k", 8)
				if err != nil || !d.Allowed || d.Limit != 10 || d.Remaining != 1 {
					t.Fatalf("b's AllowN(k, 8) after a decided k under its raise to 10: %+v, %v; want allowed, Limit 10, 1 left", d, err)
				}
				if got := rb.reads.Load() - before; got != 1 {
					t.Fatalf("a cost above b's view read the record %d times; want 1", got)
				}
				d, err = b.AllowN(ctx, "k", 11)
				if !errors.Is(err, floodgate.ErrCostExceedsLimit) || d.Allowed || d.Limit != 10 {
					t.Fatalf("b's AllowN(k, 11) under 10 an hour: %+v, %v; want ErrCostExceedsLimit with Limit 10", d, err)
				}
			})
		}
	}
}

// TestCostAboveTheViewSharesReads: calls of a cost above the capacity
// each need a read of the record begun after they were called, and share
// it: 32 callers that arrive while one read is out cost Redis a handful
// of reads, not one each (a client that sends costs no rate holds cannot
// multiply the reads).
func TestCostAboveTheViewSharesReads(t *testing.T) {
	pair := pairs(t)["server"]
	_, s := pair(t)
	r := newRecordReads(s)
	clock := &fakeClock{t0}
	l, err := redisstore.NewTokenBucket(r, floodgate.PerHour(5), redisstore.WithPrefix(prefix(t)),
		redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Hour), patient)
	mustNot(t, err)
	ctx := context.Background()
	mustAllowed(t, l, "warm", 1, true)
	r.armed.Store(true)
	before := r.reads.Load()
	var wg sync.WaitGroup
	refused := func() {
		defer wg.Done()
		if d, err := l.AllowN(ctx, "k", 6); !errors.Is(err, floodgate.ErrCostExceedsLimit) || d.Limit != 5 {
			t.Errorf("AllowN(6) under 5 an hour: %+v, %v; want ErrCostExceedsLimit with Limit 5", d, err)
		}
	}
	wg.Add(1)
	go refused()
	<-r.held
	const callers = 32
	var called atomic.Int32
	for range callers {
		wg.Add(1)
		go func() {
			called.Add(1)
			refused()
		}()
	}
	for called.Load() < callers {
		time.Sleep(100 * time.Microsecond) // until every caller has started
	}
	close(r.release)
	wg.Wait()
	if got := r.reads.Load() - before; got < 2 || got > callers/2 {
		t.Fatalf("%d callers waiting behind one read of the record made %d reads in all; want 2 to %d", callers, got, callers/2)
	}
}
