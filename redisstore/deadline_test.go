package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/redisstore/internal/groupcommit"
)

type ctxKey struct{}

// TestBoundDeadline: the context bounding a round trip ends within the
// decision timeout and no sooner than a grain before it, carries the
// caller's values, and keeps the caller's own end: a context that can
// end still ends when the caller cancels it, a shorter deadline wins.
func TestBoundDeadline(t *testing.T) {
	const timeout = 40 * time.Millisecond
	var l base
	l.timeout = timeout
	l.deadlines.init(timeout)
	grain := timeout / deadlineGrains

	valued := context.WithValue(context.Background(), ctxKey{}, "v")
	cancelable, cancel := context.WithCancel(valued)
	defer cancel()
	short, cancelShort := context.WithTimeout(valued, timeout/4)
	defer cancelShort()

	for _, tc := range []struct {
		name    string
		parent  context.Context
		shared  bool // bounded by a shared tick, no timer of its own
		values  bool
		ownDead bool // the caller's deadline, used as it is
	}{
		{name: "shorter deadline", parent: short, values: true, ownDead: true}, // first: it is short
		{name: "Background", parent: context.Background(), shared: true},
		{name: "WithValue", parent: valued, shared: true, values: true},
		{name: "WithoutCancel", parent: context.WithoutCancel(cancelable), shared: true, values: true},
		{name: "cancelable", parent: cancelable, values: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			ctx, stop := l.bound(tc.parent)
			if stop != nil {
				defer stop()
			}
			if (stop == nil) != (tc.shared || tc.ownDead) {
				t.Fatalf("cancel func %v, want one only for a timer of its own", stop != nil)
			}
			if _, ok := ctx.(*tickContext); ok != tc.shared {
				t.Fatalf("bounded by a tick: %v, want %v", ok, tc.shared)
			}
			dl, ok := ctx.Deadline()
			if !ok {
				t.Fatal("no deadline")
			}
			want, _ := tc.parent.Deadline()
			if !tc.ownDead {
				want = start.Add(timeout)
				if dl.After(time.Now().Add(timeout)) || dl.Before(want.Add(-grain)) {
					t.Fatalf("deadline %v after start, want within (%v, %v]", dl.Sub(start), timeout-grain, timeout)
				}
			} else if !dl.Equal(want) {
				t.Fatalf("deadline %v, want the caller's %v", dl, want)
			}
			if got := ctx.Value(ctxKey{}); (got == "v") != tc.values {
				t.Fatalf("value %v, want it only from a parent that has it", got)
			}
			if err := ctx.Err(); err != nil {
				t.Fatalf("Err before the deadline: %v", err)
			}
			<-ctx.Done()
			if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Err after Done: %v, want DeadlineExceeded", err)
			}
			if time.Now().Before(dl) {
				t.Fatalf("Done %v before the deadline", dl.Sub(time.Now()))
			}
		})
	}

	t.Run("caller cancels", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.Background())
		ctx, stop := l.bound(parent)
		defer stop()
		cancel()
		<-ctx.Done()
		if err := ctx.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err %v, want Canceled", err)
		}
	})

	// What a client sharing connections sends under (rueidis): the
	// caller's values, ending at the timeout and not with the caller.
	for _, tc := range []struct {
		name   string
		parent func() (context.Context, context.CancelFunc)
	}{
		{"caller cancels", func() (context.Context, context.CancelFunc) { return context.WithCancel(valued) }},
		{"caller's deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(valued, timeout/8) }},
	} {
		t.Run("shared/"+tc.name, func(t *testing.T) {
			parent, cancel := tc.parent()
			defer cancel()
			ctx, stop := l.bound(parent)
			if stop != nil {
				defer stop()
			}
			start := time.Now()
			shared, sooner := groupcommit.Shared(ctx)
			if !sooner {
				t.Fatalf("a caller's context that can end before the timeout is not marked (%T)", ctx)
			}
			cancel()
			<-ctx.Done()
			if err := shared.Err(); err != nil {
				t.Fatalf("the shared context ended with the caller's: %v", err)
			}
			if shared.Value(ctxKey{}) != "v" {
				t.Fatalf("the shared context lost the caller's values")
			}
			<-shared.Done()
			if err := shared.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("shared Err %v, want DeadlineExceeded", err)
			}
			if waited := time.Since(start); waited < timeout-grain {
				t.Fatalf("the shared context ended %v after it was made, before the timeout %v", waited, timeout)
			}
		})
	}
}

// TestBoundSharesTick: decisions on one grain share one tick (no timer
// each), and Background's context costs no allocation.
func TestBoundSharesTick(t *testing.T) {
	var l base
	l.timeout = time.Hour // a grain of 72 s: two calls in a row share it
	l.deadlines.init(l.timeout)
	a, _ := l.bound(context.Background())
	b, _ := l.bound(context.WithValue(context.Background(), ctxKey{}, 1))
	if a.Done() != b.Done() {
		t.Fatal("two decisions of one grain have two ticks")
	}
	if a != context.Context(&l.deadlines.last.Load().bg) {
		t.Fatal("Background's context is not the tick's own")
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = l.bound(context.Background()) })
	if allocs != 0 {
		t.Fatalf("%v allocations a bound of Background, want 0", allocs)
	}
}

// TestBoundConcurrent: callers that bound their round trips at once, over
// many grains, each get a deadline within their own timeout and no sooner
// than a grain before it, and a Done that closes at it, whichever tick
// they share.
func TestBoundConcurrent(t *testing.T) {
	const timeout = 5 * time.Millisecond
	var l base
	l.timeout = timeout
	l.deadlines.init(timeout)
	grain := timeout / deadlineGrains
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				start := time.Now()
				ctx, _ := l.bound(context.Background())
				end := time.Now()
				dl, _ := ctx.Deadline()
				if dl.After(end.Add(timeout)) || dl.Before(start.Add(timeout-grain)) {
					errs <- fmt.Errorf("deadline %v after the call, want within (%v, %v]", dl.Sub(start), timeout-grain, timeout)
					return
				}
				<-ctx.Done()
				if time.Now().Before(dl) || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
					errs <- fmt.Errorf("Done %v before the deadline, Err %v", dl.Sub(time.Now()), ctx.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
