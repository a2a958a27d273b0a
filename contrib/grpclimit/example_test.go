package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gRPC server limited to 2 calls per minute per peer address. A denial
// is Trailers-Only, with the quota, retry-after and
// grpc-retry-pushback-ms in its trailers, and a RetryInfo detail; an
// allowed call carries no quota metadata (see
// ExampleWithQuotaOnAllowed). A fake clock stands in for the wait.
func ExampleNew() {
	limiter, wait := exampleLimiter()
	limit, err := grpclimit.New(limiter) // keyed by the peer's address
	if err != nil {
		panic(err)
	}
	exampleCalls(limit, wait)
	// Output:
	// OK []
	// OK []
	// ResourceExhausted headers: 0 trailers: ["default";r=0;t=30] [30000]
	// OK []
}

// With WithQuotaOnAllowed, allowed calls carry the quota in their
// response headers too, for clients that pace themselves by it.
func ExampleWithQuotaOnAllowed() {
	limiter, wait := exampleLimiter()
	limit, err := grpclimit.New(limiter, grpclimit.WithQuotaOnAllowed())
	if err != nil {
		panic(err)
	}
	exampleCalls(limit, wait)
	// Output:
	// OK ["default";r=1;t=30]
	// OK ["default";r=0;t=60]
	// ResourceExhausted headers: 0 trailers: ["default";r=0;t=30] [30000]
	// OK ["default";r=0;t=60]
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

// exampleCalls serves the test service behind limit and makes four calls,
// printing what each carries; after a denial it waits the RetryInfo delay,
// as a client's retry policy waits the pushback.
func exampleCalls(limit *grpclimit.Interceptors, wait func(time.Duration)) {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()), grpc.ChainStreamInterceptor(limit.Stream()))
	testpb.RegisterTestServiceServer(srv, &testService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }() // Serve returns when Stop is called
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	client := testpb.NewTestServiceClient(conn)

	for range 4 {
		var header, trailer metadata.MD
		_, err := client.EmptyCall(context.Background(), &testpb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil {
			fmt.Println("OK", header.Get("ratelimit"))
			continue
		}
		fmt.Println(status.Code(err), "headers:", len(header), "trailers:", trailer.Get("ratelimit"), trailer.Get("grpc-retry-pushback-ms"))
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				wait(ri.GetRetryDelay().AsDuration())
			}
		}
	}
}
