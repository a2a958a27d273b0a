package floodgatetest

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The models are the suite's oracle, so their decisions are pinned here
// by hand, on rates whose period does not divide by the limit.

type modelStep struct {
	at      time.Duration
	n       int
	want    floodgate.Decision
	wantErr error
	reset   bool // reset the model before this step
}

func runModel(t *testing.T, m model, steps []modelStep) {
	t.Helper()
	for i, s := range steps {
		if s.reset {
			m.reset()
		}
		got, err := m.allowN(s.at, s.n)
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("step %d (t=%v, n=%d): error %v, want %v", i, s.at, s.n, err, s.wantErr)
		}
		if s.wantErr == nil && got != s.want {
			t.Fatalf("step %d (t=%v, n=%d):\n got %+v\nwant %+v", i, s.at, s.n, got, s.want)
		}
	}
}

func dec(allowed bool, limit, remaining int, retry, reset time.Duration) floodgate.Decision {
	return floodgate.Decision{Allowed: allowed, Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func TestTokenBucketModel(t *testing.T) {
	const ns = time.Nanosecond
	tests := []struct {
		name  string
		rate  floodgate.Rate
		burst int
		steps []modelStep
	}{
		{
			// A token every 333333333⅓ ns.
			name: "3 per second", rate: floodgate.PerSecond(3), burst: 3,
			steps: []modelStep{
				{at: 0, n: 0, want: dec(true, 3, 3, 0, 0)},
				{at: 0, n: 1, want: dec(true, 3, 2, 0, 333333334*ns)},
				{at: 0, n: 2, want: dec(true, 3, 0, 0, time.Second)},
				{at: 0, n: 1, want: dec(false, 3, 0, 333333334*ns, time.Second)},
				// 1ns before the token: 1ns to wait, and the debt of
				// 666666667ns is still three begun tokens.
				{at: 333333333 * ns, n: 1, want: dec(false, 3, 0, 1*ns, 666666667*ns)},
				{at: 333333334 * ns, n: 1, want: dec(true, 3, 0, 0, time.Second)},
				{at: 2 * time.Second, n: 0, want: dec(true, 3, 3, 0, 0)},
				{at: 2 * time.Second, n: 4, wantErr: floodgate.ErrCostExceedsLimit},
				{at: 2 * time.Second, n: -1, wantErr: floodgate.ErrInvalidCost},
				{at: 2 * time.Second, n: 3, want: dec(true, 3, 0, 0, time.Second)},
				{at: 2 * time.Second, reset: true, n: 0, want: dec(true, 3, 3, 0, 0)},
			},
		},
		{
			// A token every 85714285714²⁄₇ ns.
			name: "7 per 10 minutes", rate: floodgate.Rate{Limit: 7, Period: 10 * time.Minute}, burst: 7,
			steps: []modelStep{
				{at: 0, n: 7, want: dec(true, 7, 0, 0, 10*time.Minute)},
				{at: 0, n: 1, want: dec(false, 7, 0, 85714285715*ns, 10*time.Minute)},
				{at: 85714285714 * ns, n: 1, want: dec(false, 7, 0, 1*ns, 514285714286*ns)},
				{at: 85714285715 * ns, n: 1, want: dec(true, 7, 0, 0, 10*time.Minute)},
				{at: 10 * time.Minute, n: 0, want: dec(true, 7, 6, 0, 85714285715*ns)},
			},
		},
		{
			name: "burst above the limit", rate: floodgate.PerSecond(2), burst: 5,
			steps: []modelStep{
				{at: 0, n: 5, want: dec(true, 5, 0, 0, 2500*time.Millisecond)},
				{at: time.Second, n: 3, want: dec(false, 5, 2, 500*time.Millisecond, 1500*time.Millisecond)},
				{at: time.Second, n: 2, want: dec(true, 5, 0, 0, 2500*time.Millisecond)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runModel(t, newTokenBucketModel(tt.rate, tt.burst, 0), tt.steps)
		})
	}
}

func TestSlidingLogModel(t *testing.T) {
	const ms = time.Millisecond
	runModel(t, newSlidingLogModel(floodgate.PerSecond(3)), []modelStep{
		{at: 0, n: 1, want: dec(true, 3, 2, 0, time.Second)},
		{at: 100 * ms, n: 2, want: dec(true, 3, 0, 0, time.Second)},
		// One unit needs the event at 0 gone, two need those at 100ms.
		{at: 200 * ms, n: 1, want: dec(false, 3, 0, 800*ms, 900*ms)},
		{at: 200 * ms, n: 2, want: dec(false, 3, 0, 900*ms, 900*ms)},
		{at: 999 * ms, n: 1, want: dec(false, 3, 0, 1*ms, 101*ms)},
		// An event at t stops counting at t+Period.
		{at: 1000 * ms, n: 1, want: dec(true, 3, 0, 0, time.Second)},
		{at: 1100 * ms, n: 0, want: dec(true, 3, 2, 0, 900*ms)},
		{at: 1100 * ms, n: 4, wantErr: floodgate.ErrCostExceedsLimit},
		{at: 1100 * ms, n: -1, wantErr: floodgate.ErrInvalidCost},
		{at: 1100 * ms, n: 2, want: dec(true, 3, 0, 0, time.Second)},
		{at: 1100 * ms, n: 1, want: dec(false, 3, 0, 900*ms, time.Second)},
		{at: 1100 * ms, reset: true, n: 0, want: dec(true, 3, 3, 0, 0)},
	})
}
