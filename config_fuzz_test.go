package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// FuzzTokenBucketConfig feeds arbitrary configurations and costs to
// NewTokenBucket: it must either refuse them with one of the package's
// sentinel errors or build a limiter whose decisions keep their invariants.
// It never panics.
func FuzzTokenBucketConfig(f *testing.F) {
	f.Add(10, int64(time.Minute), 0, 0, 0, 1, false)
	f.Add(3, int64(time.Second), 5, 100, 4, 5, false)
	f.Add(7, int64(10*time.Minute), 0, 1, 1, 8, true)
	f.Add(0, int64(time.Second), 0, 0, 0, 1, false)
	f.Add(-1, int64(-1), -1, -1, 3, -1, true)
	f.Add(1<<24, int64(1<<62), 1<<24, 1<<30, 1<<20, 1<<24, false)
	f.Add(1, int64(1), 1<<24, 2, 2, 1<<24, true)
	f.Fuzz(func(t *testing.T, limit int, period int64, burst, maxKeys, shards, n int, interval bool) {
		now := time.Unix(1_700_000_000, 0)
		opts := []floodgate.Option{floodgate.WithClock(func() time.Time { return now })}
		if burst != 0 {
			opts = append(opts, floodgate.WithBurst(burst))
		}
		if maxKeys != 0 {
			opts = append(opts, floodgate.WithMaxKeys(maxKeys))
		}
		if shards != 0 {
			opts = append(opts, floodgate.WithShards(shards))
		}
		if interval {
			opts = append(opts, floodgate.WithIntervalRefill())
		}
		r := floodgate.Rate{Limit: limit, Period: time.Duration(period)}
		lim, err := floodgate.NewTokenBucket(r, opts...)
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidRate) && !errors.Is(err, floodgate.ErrInvalidOption) {
				t.Fatalf("NewTokenBucket(%v): error %v wraps no sentinel", r, err)
			}
			if lim != nil {
				t.Fatalf("NewTokenBucket returned a limiter with error %v", err)
			}
			return
		}
		checkDecisions(t, lim, r, n, func() { now = now.Add(time.Duration(period) / 3) })
	})
}

func TestWithShardsIsBounded(t *testing.T) {
	for _, n := range []int{0, -4, 3, floodgate.MaxShards * 2} {
		if _, err := floodgate.NewTokenBucket(floodgate.PerSecond(1), floodgate.WithMaxKeys(1<<30), floodgate.WithShards(n)); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("WithShards(%d): err = %v, want ErrInvalidOption", n, err)
		}
	}
	lim, err := floodgate.NewTokenBucket(floodgate.PerSecond(1), floodgate.WithMaxKeys(1<<20), floodgate.WithShards(floodgate.MaxShards))
	if err != nil {
		t.Fatalf("WithShards(MaxShards): %v", err)
	}
	if got := lim.Stats().MaxKeys; got != 1<<20 {
		t.Fatalf("MaxKeys = %d, want %d", got, 1<<20)
	}
}

// FuzzWindowConfig is FuzzTokenBucketConfig for the sliding log and the
// sliding counter, which refuse WithBurst and (the counter)
// WithCountDenied.
func FuzzWindowConfig(f *testing.F) {
	f.Add(5, int64(time.Minute), 0, 0, 1, false, false, false)
	f.Add(100, int64(time.Hour), 1000, 16, 100, true, false, true)
	f.Add(10_000, int64(time.Hour), 0, 0, 3, false, true, false)
	f.Add(0, int64(-5), -1, 3, 0, true, true, true)
	f.Add(1<<24, int64(1<<62), 1<<20, 1<<12, 1<<24+1, false, true, false)
	f.Fuzz(func(t *testing.T, limit int, period int64, maxKeys, shards, n int, countDenied, counter, burst bool) {
		now := time.Unix(1_700_000_000, 0)
		opts := []floodgate.Option{floodgate.WithClock(func() time.Time { return now })}
		if maxKeys != 0 {
			opts = append(opts, floodgate.WithMaxKeys(maxKeys))
		}
		if shards != 0 {
			opts = append(opts, floodgate.WithShards(shards))
		}
		if countDenied {
			opts = append(opts, floodgate.WithCountDenied())
		}
		if burst {
			opts = append(opts, floodgate.WithBurst(limit))
		}
		r := floodgate.Rate{Limit: limit, Period: time.Duration(period)}
		var lim floodgate.Limiter
		var err error
		if counter {
			lim, err = floodgate.NewSlidingCounter(r, opts...)
		} else {
			lim, err = floodgate.NewSlidingLog(r, opts...)
		}
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidRate) && !errors.Is(err, floodgate.ErrInvalidOption) {
				t.Fatalf("%v: error %v wraps no sentinel", r, err)
			}
			return
		}
		if burst || (counter && countDenied) {
			t.Fatalf("an option that does not apply was accepted (burst %v, counter %v, countDenied %v)", burst, counter, countDenied)
		}
		checkDecisions(t, lim, r, n, func() { now = now.Add(time.Duration(period) / 3) })
	})
}

// checkDecisions asks lim for n a few times, advancing the clock between
// calls, and fails on any decision that breaks the Decision invariants or
// any error that wraps no sentinel.
func checkDecisions(t *testing.T, lim floodgate.Limiter, r floodgate.Rate, n int, advance func()) {
	t.Helper()
	ctx := context.Background()
	for step := 0; step < 4; step++ {
		d, err := lim.AllowN(ctx, "k", n)
		switch {
		case err != nil:
			if !errors.Is(err, floodgate.ErrCostExceedsLimit) && !errors.Is(err, floodgate.ErrInvalidCost) {
				t.Fatalf("AllowN(%d): error %v wraps no sentinel", n, err)
			}
			if d.Allowed || d.RetryAfter != 0 {
				t.Fatalf("AllowN(%d) failed with %v but reported %+v", n, err, d)
			}
		case d.Remaining < 0 || d.Remaining > d.Limit || d.RetryAfter < 0 || d.ResetAfter < 0:
			t.Fatalf("AllowN(%d) on %v: broken invariants %+v", n, r, d)
		case d.Allowed && d.RetryAfter != 0:
			t.Fatalf("allowed with RetryAfter %s", d.RetryAfter)
		}
		advance()
	}
}
