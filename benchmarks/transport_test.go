package benchmarks

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/benchmarks/internal/grpclimitv01"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
)

// transportClients is the number of client addresses the direct cases of
// BenchmarkTransport spread their calls over, each a populated key.
const transportClients = 10_000

// BenchmarkTransport measures what floodgate adds to an allowed call on
// each transport, against the same call without it, in the same run:
//
//   - direct/…: the adapter called as its server calls it, over 10,000
//     populated client keys — the gRPC unary interceptor against the
//     handler alone, and the HTTP middleware's ServeHTTP against the
//     handler's;
//   - e2e/…: one real client calling a real server over loopback TCP —
//     grpc-go bare, with an interceptor that only calls the handler
//     (what grpc-go costs for any interceptor), with grpclimit (with and
//     without the quota metadata) and with v0.1's grpclimit (a fake
//     *http.Request per call), and net/http bare and with the
//     middleware; each also reports the process's CPU time per call
//     (cpu-ns/op, client and server), steadier than wall time on a
//     shared machine.
//
// The overhead of an adapter is its case minus its transport's bare case.
func BenchmarkTransport(b *testing.B) {
	b.Run("direct/grpc", benchGRPCDirect)
	b.Run("direct/http", benchHTTPDirect)
	b.Run("e2e/grpc", benchGRPCEndToEnd)
	b.Run("e2e/http", benchHTTPEndToEnd)
}

func newLimiter(b *testing.B) floodgate.Limiter {
	l, err := floodgate.NewTokenBucket(floodgate.PerSecond(1 << 24))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func benchGRPCDirect(b *testing.B) {
	ctxs := make([]context.Context, transportClients)
	for i := range ctxs {
		ctx := grpcpeer.NewContext(context.Background(), &grpcpeer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 5000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("user-agent", "bench", "content-type", "application/grpc"))
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, nopTransportStream{})
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/EmptyCall"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	interceptors := map[string]grpc.UnaryServerInterceptor{
		"handler":               handlerOnly,
		"grpclimit":             mustInterceptor(grpclimit.New(newLimiter(b))).Unary(),
		"grpclimit-no-quota-md": mustInterceptor(grpclimit.New(newLimiter(b), grpclimit.WithHeaders(floodgate.HeadersNone))).Unary(),
		"grpclimit-v0.1":        mustV01(grpclimitv01.New(newLimiter(b))).Unary(),
	}
	for _, name := range []string{"handler", "grpclimit", "grpclimit-no-quota-md", "grpclimit-v0.1"} {
		unary := interceptors[name]
		for _, ctx := range ctxs { // populate the key set
			if _, err := unary(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := unary(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func handlerOnly(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

func mustInterceptor(i *grpclimit.Interceptors, err error) *grpclimit.Interceptors {
	if err != nil {
		panic(err)
	}
	return i
}

func mustV01(i *grpclimitv01.Interceptors, err error) *grpclimitv01.Interceptors {
	if err != nil {
		panic(err)
	}
	return i
}

// nopTransportStream stands in for the server's transport stream, so that
// grpc.SetHeader succeeds as on a real server.
type nopTransportStream struct{}

func (nopTransportStream) Method() string               { return "/grpc.testing.TestService/EmptyCall" }
func (nopTransportStream) SetHeader(metadata.MD) error  { return nil }
func (nopTransportStream) SendHeader(metadata.MD) error { return nil }
func (nopTransportStream) SetTrailer(metadata.MD) error { return nil }

func benchHTTPDirect(b *testing.B) {
	addrs := make([]string, transportClients)
	for i := range addrs {
		addrs[i] = net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String() + ":5000"
	}
	mw, err := floodgate.NewMiddleware(newLimiter(b))
	if err != nil {
		b.Fatal(err)
	}
	handlers := map[string]http.Handler{"handler": okHandler, "middleware": mw(okHandler)}
	for _, name := range []string{"handler", "middleware"} {
		h, w, r := handlers[name], newRecorder(), newProbe()
		for _, a := range addrs {
			r.RemoteAddr = a
			w.reset()
			h.ServeHTTP(w, r)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				r.RemoteAddr = addrs[i%len(addrs)]
				w.reset()
				h.ServeHTTP(w, r)
				if w.status() != http.StatusOK {
					b.Fatalf("status %d", w.status())
				}
			}
		})
	}
}

// emptyService answers EmptyCall.
type emptyService struct {
	testpb.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func benchGRPCEndToEnd(b *testing.B) {
	cases := []struct {
		name  string
		unary grpc.UnaryServerInterceptor
	}{
		{"bare", nil},
		{"noop-interceptor", handlerOnly},
		{"grpclimit", mustInterceptor(grpclimit.New(newLimiter(b))).Unary()},
		{"grpclimit-no-quota-md", mustInterceptor(grpclimit.New(newLimiter(b), grpclimit.WithHeaders(floodgate.HeadersNone))).Unary()},
		{"grpclimit-v0.1", mustV01(grpclimitv01.New(newLimiter(b))).Unary()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if c.unary != nil {
				opts = append(opts, grpc.UnaryInterceptor(c.unary))
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(opts...)
			testpb.RegisterTestServiceServer(srv, emptyService{})
			go func() { _ = srv.Serve(ln) }() // returns when Stop is called
			defer srv.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			client, ctx := testpb.NewTestServiceClient(conn), context.Background()
			if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
				b.Fatal(err) // connects
			}
			cpu := startCPU(b)
			for range b.N {
				if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
	}
}

func benchHTTPEndToEnd(b *testing.B) {
	mw, err := floodgate.NewMiddleware(newLimiter(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", okHandler}, {"middleware", mw(okHandler)}} {
		b.Run(c.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: c.h}
			go func() { _ = srv.Serve(ln) }() // returns when Close is called
			defer func() { _ = srv.Close() }()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			url := "http://" + ln.Addr().String() + "/"
			cpu := startCPU(b)
			for range b.N {
				resp, err := client.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal("status " + strconv.Itoa(resp.StatusCode))
				}
			}
			cpu.report(b)
		})
	}
}
