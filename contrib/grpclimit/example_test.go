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
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A gRPC server limited to 2 calls per minute per peer address; the client
// reads the exact wait from the RetryInfo detail of the denial and retries
// after it. A fake clock stands in for the wait.
func ExampleNew() {
	var now atomic.Int64 // read by the server's goroutines
	now.Store(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC).UnixNano())
	limiter, err := floodgate.NewTokenBucket(floodgate.PerMinute(2),
		floodgate.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		panic(err)
	}
	limit, err := grpclimit.New(limiter) // keyed by the peer's address
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()), grpc.ChainStreamInterceptor(limit.Stream()))
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
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
	client := healthgrpc.NewHealthClient(conn)

	for range 4 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		fmt.Println(status.Code(err), md.Get("ratelimit"))
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				wait := ri.GetRetryDelay().AsDuration()
				fmt.Println("retry after", wait)
				now.Add(int64(wait)) // time.Sleep(wait) in a real client
			}
		}
	}
	// Output:
	// OK ["default";r=1;t=30]
	// OK ["default";r=0;t=60]
	// ResourceExhausted ["default";r=0;t=30]
	// retry after 30s
	// OK ["default";r=0;t=60]
}
