package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A connect handler limited to 2 calls per minute per peer address, called
// with a connect-go client on the gRPC protocol. A denial is
// CodeResourceExhausted with a RetryInfo detail and the quota in its
// metadata; an allowed call carries no quota header (see
// ExampleWithQuotaOnAllowed). A fake clock stands in for the wait.
func ExampleNew() {
	limiter, wait := exampleLimiter()
	limit, err := connectlimit.New(limiter) // keyed by the peer's address
	if err != nil {
		panic(err)
	}
	exampleCalls(limit, wait)
	// Output:
	// hello, ann []
	// hello, ann []
	// resource_exhausted "default";r=0;t=30 30000
	// hello, ann []
}

// With WithQuotaOnAllowed, allowed calls carry the quota headers too, for
// clients that pace themselves by them.
func ExampleWithQuotaOnAllowed() {
	limiter, wait := exampleLimiter()
	limit, err := connectlimit.New(limiter, connectlimit.WithQuotaOnAllowed())
	if err != nil {
		panic(err)
	}
	exampleCalls(limit, wait)
	// Output:
	// hello, ann ["default";r=1;t=30]
	// hello, ann ["default";r=0;t=60]
	// resource_exhausted "default";r=0;t=30 30000
	// hello, ann ["default";r=0;t=60]
}

// exampleLimiter returns a limiter of 2 calls per minute on a fake clock,
// and a function that moves the clock on.
func exampleLimiter() (*floodgate.TokenBucket, func(time.Duration)) {
	var now atomic.Int64 // read by the server's goroutines
	now.Store(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC).UnixNano())
	limiter, err := floodgate.NewTokenBucket(floodgate.PerMinute(2),
		floodgate.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		panic(err)
	}
	return limiter, func(d time.Duration) { now.Add(int64(d)) }
}

// exampleCalls serves a greeting behind limit and makes four calls,
// printing what each carries; after a denial it waits the RetryInfo
// delay.
func exampleCalls(limit *connectlimit.Interceptor, wait func(time.Duration)) {
	const procedure = "/greet.v1.GreetService/Greet"
	greet := func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
	}
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, greet, connect.WithInterceptors(limit)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true // gRPC needs HTTP/2
	srv.StartTLS()
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+procedure, connect.WithGRPC())
	for range 4 {
		resp, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("ann")))
		var ce *connect.Error
		if !errors.As(err, &ce) {
			fmt.Println(resp.Msg.GetValue(), resp.Header().Values("RateLimit"))
			continue
		}
		fmt.Println(ce.Code(), ce.Meta().Get("RateLimit"), ce.Meta().Get("Grpc-Retry-Pushback-Ms"))
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					wait(ri.GetRetryDelay().AsDuration()) // the client waits
				}
			}
		}
	}
}
