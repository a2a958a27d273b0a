package benchmarks

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkKinds times floodgate's middleware ServeHTTP for each
// admission kind beside the plain rate limit it builds on, over the same
// 100,000 populated client IPs as BenchmarkMiddleware's allowed case, in
// one run:
//
//   - rate: the plain token bucket (BenchmarkMiddleware's floodgate case);
//   - inflight: an in-flight limit per client (NewInFlight), a slot taken
//     and released per request;
//   - rate+inflight: All(token bucket, in-flight limit);
//   - costafter: the token bucket under WithCostAfter, the handler
//     reporting its cost with ReportCost;
//   - wait: the token bucket under WithWait, allowed at once (the
//     booking path in place of AllowN);
//   - wait/booked: a spent bucket under WithWait whose every request is
//     booked ahead and held, on a timer that fires at once, so that the
//     work of waiting is timed without the wait.
//
// A kind's cost is its case minus rate's.
func BenchmarkKinds(b *testing.B) {
	addrs := clientIPs(populatedKeys)
	for i := range addrs {
		addrs[i] += ":40000"
	}
	bucket := func(b *testing.B) floodgate.Limiter {
		tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: allowQuota.limit, Period: allowQuota.period})
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	inFlight := func(b *testing.B) floodgate.Limiter {
		l, err := floodgate.NewInFlight(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	wait := floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Second, PerKey: 1 << 20, Total: 1 << 20})
	cases := []struct {
		name    string
		limiter func(*testing.B) floodgate.Limiter
		opts    []floodgate.MiddlewareOption
		next    http.Handler
	}{
		{"rate", bucket, nil, okHandler},
		{"inflight", inFlight, nil, okHandler},
		{"rate+inflight", func(b *testing.B) floodgate.Limiter {
			all, err := floodgate.All(bucket(b), inFlight(b))
			if err != nil {
				b.Fatal(err)
			}
			return all
		}, nil, okHandler},
		{"costafter", bucket, []floodgate.MiddlewareOption{floodgate.WithCostAfter(floodgate.CostReported)}, reportingOK},
		{"wait", bucket, []floodgate.MiddlewareOption{wait}, okHandler},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			mw, err := floodgate.NewMiddleware(c.limiter(b), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			benchKind(b, mw(c.next), addrs)
		})
	}
	b.Run("wait/booked", benchWaitBooked)
}

// reportingOK reports a cost of 1, the estimate: settling charges nothing
// more, and the case times the meter and the settlement.
var reportingOK = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_ = floodgate.ReportCost(r.Context(), 1)
	w.WriteHeader(http.StatusOK)
})

// benchKind populates h's keys once, then times requests over them.
func benchKind(b *testing.B, h http.Handler, addrs []string) {
	w, r := newRecorder(), newProbe()
	p := peer{name: "floodgate"}
	for _, a := range addrs {
		serve(b, p, h, w, r, a, http.StatusOK)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	defer cpu.report(b)
	j := 0
	for i := 0; i < b.N; i++ {
		serve(b, p, h, w, r, addrs[j], http.StatusOK)
		if j++; j == len(addrs) {
			j = 0
		}
	}
}

// benchWaitBooked times requests that each book the next token ahead and
// wait for it on a timer that fires at once: one client whose bucket is
// spent, a token every nanosecond, MaxWait an hour.
func benchWaitBooked(b *testing.B) {
	tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 24, Period: 1 << 24}, floodgate.WithBurst(1))
	if err != nil {
		b.Fatal(err)
	}
	fired := make(chan time.Time, 1)
	instant := func(time.Duration) (<-chan time.Time, func() bool) {
		fired <- time.Time{}
		return fired, func() bool { return false }
	}
	mw, err := floodgate.NewMiddleware(tb,
		floodgate.WithWait(floodgate.WaitLimits{MaxWait: time.Hour, PerKey: 1, Total: 1}),
		floodgate.WithWaitTimer(instant))
	if err != nil {
		b.Fatal(err)
	}
	h, w, r := mw(okHandler), newRecorder(), newProbe()
	const addr = hotKey + ":40000"
	p := peer{name: "floodgate"}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	defer cpu.report(b)
	for i := 0; i < b.N; i++ {
		serve(b, p, h, w, r, addr, http.StatusOK)
	}
}
