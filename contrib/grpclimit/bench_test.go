package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// benchPeers is the number of client addresses the benchmarks spread
// their calls over, each one a populated key of the limiter.
const benchPeers = 10_000

// BenchmarkUnaryInterceptor measures what the interceptor adds to an
// allowed unary call, called as the server calls it, over 10,000 peers:
// against the handler alone in the same run, with the quota metadata
// (the default) and without (HeadersNone).
func BenchmarkUnaryInterceptor(b *testing.B) {
	ctxs := make([]context.Context, benchPeers)
	for i := range ctxs {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 5000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("user-agent", "bench", "content-type", "application/grpc"))
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/EmptyCall"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.Run("handler-alone", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, err := handler(ctxs[i%len(ctxs)], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name string
		opts []grpclimit.Option
	}{{"interceptor", nil}, {"interceptor-no-quota-metadata", []grpclimit.Option{grpclimit.WithHeaders(floodgate.HeadersNone)}}} {
		unary := must(grpclimit.New(bucket(b, floodgate.PerSecond(1<<24)), c.opts...)).Unary()
		for _, ctx := range ctxs { // populate the key set
			if _, err := unary(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := unary(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nopStream stands in for the server's transport stream, so that
// SetHeader and SendHeader succeed as on a real server.
type nopStream struct{}

func (nopStream) Method() string               { return "/grpc.testing.TestService/EmptyCall" }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }

// BenchmarkUnaryServer measures an allowed unary call end to end, a real
// grpc-go client calling a real server over loopback TCP: a bare server,
// one with an interceptor that only calls the handler (what grpc-go
// itself costs for any interceptor: 2 allocations), and the same with
// the interceptors, with and without the quota metadata, in the same
// run. The difference is the interceptor's cost as a user sees it, the
// metadata's transport and decoding included. Besides wall time, each
// reports the process's CPU time per call (cpu-ns/op, client and server
// together), which does not count the time spent waiting for a core on a
// shared machine.
func BenchmarkUnaryServer(b *testing.B) {
	noop := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	for _, c := range []struct {
		name string
		opts []grpclimit.Option
		with []grpc.ServerOption // instead of the interceptors
	}{
		{"bare", nil, []grpc.ServerOption{}},
		{"noop-interceptor", nil, []grpc.ServerOption{grpc.ChainUnaryInterceptor(noop)}},
		{"limited", nil, nil},
		{"limited-no-quota-metadata", []grpclimit.Option{grpclimit.WithHeaders(floodgate.HeadersNone)}, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := c.with
			if opts == nil {
				ic := must(grpclimit.New(bucket(b, floodgate.PerSecond(1<<24)), c.opts...))
				opts = append(opts, grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
			}
			client := benchServer(b, opts...)
			ctx := context.Background()
			if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				b.Fatal(err) // connects
			}
			b.ReportAllocs()
			start, ok := processCPU()
			b.ResetTimer()
			for range b.N {
				if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if end, ok2 := processCPU(); ok && ok2 {
				b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

func benchServer(b *testing.B, opts ...grpc.ServerOption) testpb.TestServiceClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, &testService{})
	go func() { _ = srv.Serve(ln) }() // returns when Stop is called
	b.Cleanup(srv.Stop)
	conn := must(grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())))
	b.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// BenchmarkUnaryOverhead measures the same calls as BenchmarkUnaryServer,
// paired: one client each for a bare server, a limited one and one
// limited without the quota metadata, called in turn, 100 calls at a
// time, so that the load of a shared machine, which drifts over seconds,
// weighs on the three alike. It reports each one's CPU time per call
// (client and server) and the limited ones' overhead over the bare one:
// overhead-cpu-ns is what an allowed call costs more with the limit.
func BenchmarkUnaryOverhead(b *testing.B) {
	clients := []testpb.TestServiceClient{benchServer(b)}
	for _, opts := range [][]grpclimit.Option{nil, {grpclimit.WithHeaders(floodgate.HeadersNone)}} {
		ic := must(grpclimit.New(bucket(b, floodgate.PerSecond(1<<24)), opts...))
		clients = append(clients, benchServer(b, grpc.ChainUnaryInterceptor(ic.Unary())))
	}
	ctx := context.Background()
	var cpu [3]int64
	const batch = 100
	b.ResetTimer()
	for n := 0; n < b.N; n += batch {
		for i, client := range clients {
			start, _ := processCPU()
			for range batch {
				if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
			end, _ := processCPU()
			cpu[i] += end - start
		}
	}
	b.StopTimer()
	calls := float64((b.N + batch - 1) / batch * batch)
	b.ReportMetric(float64(cpu[0])/calls, "bare-cpu-ns/call")
	b.ReportMetric(float64(cpu[1]-cpu[0])/calls, "overhead-cpu-ns/call")
	b.ReportMetric(float64(cpu[2]-cpu[0])/calls, "overhead-no-quota-md-cpu-ns/call")
}
