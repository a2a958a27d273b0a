// Package yield marks the points inside floodgate's compound decisions
// where floodgatetest's deterministic scheduler may switch to another
// call: between the limiters of a Composite, and before a PlanLimiter's
// decision waits for its key's lookup (run on a goroutine of the
// limiter's own, which the scheduler lets finish). A point holds no lock,
// so a call parked there blocks no other.
//
// A point costs one atomic load and a branch not taken while no
// deterministic check runs in the process (the count of enabled checks is
// zero); while one runs, it looks up the scheduler's function in the
// call's context and calls it if the call is one of that check's, so that
// other calls in the same process (parallel tests) pass straight through.
package yield

import (
	"context"
	"sync/atomic"
)

// enabled counts the deterministic checks running in the process.
var enabled atomic.Int32

// key is the context key of a check's scheduler function.
type key struct{}

// Func is a scheduler's function: it parks the calling call at the point
// where until the scheduler resumes it, which it does only once until is
// closed, if until is not nil.
type Func func(where string, until <-chan struct{})

// Point gives the scheduler of the check that ctx belongs to, if any, the
// chance to run another call first. where names the point, for the
// scheduler's trace. It must be called with no lock held.
func Point(ctx context.Context, where string) {
	if enabled.Load() != 0 { // small enough to inline: the hot path is this load
		point(ctx, where, nil)
	}
}

// Until is Point before a wait for until to be closed (by another call):
// the scheduler runs other calls until it is, so that the wait that
// follows does not block the one call that runs.
func Until(ctx context.Context, where string, until <-chan struct{}) {
	if enabled.Load() != 0 {
		point(ctx, where, until)
	}
}

func point(ctx context.Context, where string, until <-chan struct{}) {
	if f, ok := ctx.Value(key{}).(Func); ok {
		f(where, until)
	}
}

// Enable turns the points on for the life of one check; the returned
// function turns them off again (once the last check has ended).
func Enable() (disable func()) {
	enabled.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			enabled.Add(-1)
		}
	}
}

// With returns ctx carrying f, the scheduler function that the points a
// call under ctx reaches call.
func With(ctx context.Context, f Func) context.Context {
	return context.WithValue(ctx, key{}, f)
}
