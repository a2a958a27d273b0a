package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// job is a call of some transport that is not HTTP: a queue's message,
// say, whose tenant is the client.
type job struct {
	tenant string
	fails  bool
}

// An adapter over the admission core: key the call with a SelectorFor
// over the transport's own call type, admit it, answer the Outcome in the
// transport's terms, and settle it after the handler. Here only failed
// jobs count (WithRefundUncounted): 2 failures per hour per tenant.
func ExampleNewGate() {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	failures, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: time.Hour},
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	sel, err := floodgate.NewSelectorFor(floodgate.PolicyFor[job]{
		Name: "tenant", Limiter: failures,
		Key: func(j job) (string, error) {
			if j.tenant == "" {
				return "", floodgate.ErrNoKey
			}
			return j.tenant, nil
		},
	})
	if err != nil {
		panic(err)
	}
	gate, err := floodgate.NewGate(sel, floodgate.WithRefundUncounted())
	if err != nil {
		panic(err)
	}

	run := func(j job) string {
		ctx := context.Background()
		c := sel.Call(j)
		c.Method, c.Path = "RUN", "/jobs"
		out := gate.Admit(ctx, c)
		if out.Blocked {
			return fmt.Sprintf("%s: refused (%s), retry after %v", out.Call.Policy(), out.Kind, out.Decision.RetryAfter)
		}
		failed := j.fails // the handler
		gate.Settle(ctx, out, floodgate.Result{Uncounted: !failed})
		return fmt.Sprintf("ran, failed=%v, RateLimit %s", failed, out.Quota.RateLimit())
	}
	for _, j := range []job{{"acme", false}, {"acme", true}, {"acme", false}, {"acme", true}, {"acme", false}, {"", false}} {
		fmt.Println(run(j))
	}
	// Output:
	// ran, failed=false, RateLimit ["tenant";r=1;t=1800]
	// ran, failed=true, RateLimit ["tenant";r=1;t=1800]
	// ran, failed=false, RateLimit ["tenant";r=0;t=3600]
	// ran, failed=true, RateLimit ["tenant";r=0;t=3600]
	// tenant: refused (denied), retry after 30m0s
	// tenant: refused (client error), retry after 0s
}
