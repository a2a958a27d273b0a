package benchmarks

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/benchmarks/internal/grpclimitv01"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"github.com/floodgate-go/floodgate/internal/benchquota"
	"github.com/floodgate-go/floodgate/internal/interleave"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
)

// transportClients is the number of client addresses the direct cases of
// BenchmarkTransport spread their calls over, each a populated key.
const transportClients = 10_000

// transportQuotas are the steady and the draining quota (package
// benchquota): the docs quote the draining figures. In the direct cases
// each client has spent a different amount (spendApart), so that under
// the draining quota consecutive calls, of different clients, differ
// too.
var transportQuotas = benchquota.Quotas

// grpcModes are the ways of sending the quota over gRPC the cases
// compare: the default, the quota on allowed calls too, and none.
var grpcModes = []struct {
	name string
	opts []grpclimit.Option
}{
	{"grpclimit", nil},
	{"grpclimit-quota-on-allowed", grpcQuotaOnAllowed},
	{"grpclimit-headers-none", []grpclimit.Option{grpclimit.WithHeaders(floodgate.HeadersNone)}},
}

// grpcQuotaOnAllowed sends the quota on allowed calls. (Before issue 31
// the default did, and this was nil.)
var grpcQuotaOnAllowed = []grpclimit.Option{grpclimit.WithQuotaOnAllowed()}

// BenchmarkTransport measures what floodgate adds to an allowed call on
// each transport, against the same call without it, in the same run,
// under each of transportQuotas:
//
//   - direct/…: the adapter called as its server calls it, over 10,000
//     populated client keys — the gRPC unary interceptor against the
//     handler alone, and the HTTP middleware's ServeHTTP against the
//     handler's;
//   - e2e/…: a real client calling a real server over loopback TCP, in
//     interleaved rounds (package interleave: 100 calls to each server
//     in turn, so that a drifting load weighs on all alike) — grpc-go
//     bare, with an interceptor that only calls the handler (what
//     grpc-go costs for any interceptor), with grpclimit in each mode
//     and with v0.1's grpclimit (a fake *http.Request per call); net/http
//     bare and with the middleware. Each case reports, over its bare
//     server, the median of the rounds' differences in CPU time per call
//     (client and server) and the allocations per call;
//   - e2e-saturated/grpc: the gRPC servers of e2e/grpc called by 32
//     goroutines at once over each one's connection, so that both cores
//     stay busy (serial calls leave them idle between a call and its
//     answer, and on an idle machine the runtime's spinning there
//     outweighs the adapter by an order of magnitude), in batches of
//     1,000 calls, each case's between two of the bare server's and set
//     against their mean, in a new random order each round
//     (interleave.RunSaturated). Run it with -benchtime 64000x or more
//     (64 rounds).
func BenchmarkTransport(b *testing.B) {
	b.Run("direct/grpc", benchGRPCDirect)
	b.Run("direct/http", benchHTTPDirect)
	b.Run("e2e/grpc", benchGRPCEndToEnd)
	b.Run("e2e/http", benchHTTPEndToEnd)
	b.Run("e2e-saturated/grpc", benchGRPCSaturated)
}

func newLimiter(b *testing.B, r floodgate.Rate) *floodgate.TokenBucket {
	l, err := floodgate.NewTokenBucket(r)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// transportAddr is the address of the i-th client of the direct cases.
func transportAddr(i int) net.IP { return net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)) }

// spendApart makes the i-th client spend i units more of l, so that
// under the draining quota consecutive calls see different values.
func spendApart(b *testing.B, l *floodgate.TokenBucket) {
	for i := range transportClients {
		if _, err := l.AllowN(context.Background(), transportAddr(i).String(), i); err != nil {
			b.Fatal(err)
		}
	}
}

func benchGRPCDirect(b *testing.B) {
	ctxs := make([]context.Context, transportClients)
	for i := range ctxs {
		ctx := grpcpeer.NewContext(context.Background(), &grpcpeer.Peer{Addr: &net.TCPAddr{IP: transportAddr(i), Port: 5000}})
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("user-agent", "bench", "content-type", "application/grpc"))
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, nopTransportStream{})
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/EmptyCall"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	run := func(name string, unary grpc.UnaryServerInterceptor) {
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
	run("handler", handlerOnly)
	for _, q := range transportQuotas {
		for _, m := range grpcModes {
			l := newLimiter(b, q.Rate)
			spendApart(b, l)
			run(q.Name+"/"+m.name, mustInterceptor(grpclimit.New(l, m.opts...)).Unary())
		}
		l := newLimiter(b, q.Rate)
		spendApart(b, l)
		run(q.Name+"/grpclimit-v0.1", mustV01(grpclimitv01.New(l)).Unary())
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
		addrs[i] = transportAddr(i).String() + ":5000"
	}
	run := func(name string, h http.Handler) {
		w, r := newRecorder(), newProbe()
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
	run("handler", okHandler)
	for _, q := range transportQuotas {
		l := newLimiter(b, q.Rate)
		spendApart(b, l)
		mw, err := floodgate.NewMiddleware(l)
		if err != nil {
			b.Fatal(err)
		}
		run(q.Name+"/middleware", mw(okHandler))
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
	interleave.Bench(b, grpcEndToEndCases(b), 100)
}

// saturatedCallers and saturatedBatch are how e2e-saturated calls each
// server: 32 calls in flight on its connection are many times what 2
// cores can serve at once (base-cores says whether they kept them
// busy); a batch of 1,000 makes its ends, where fewer calls are in
// flight, a small part.
const (
	saturatedCallers = 32
	saturatedBatch   = 1000
)

func benchGRPCSaturated(b *testing.B) {
	interleave.BenchSaturated(b, grpcEndToEndCases(b), saturatedBatch, saturatedCallers)
}

// grpcEndToEndCases serves EmptyCall bare, with an interceptor that only
// calls the handler, with grpclimit in each mode under each quota and
// with v0.1's grpclimit, each on a port of its own, and returns a call
// of a connected client for each; the calls may be made from many
// goroutines at once.
func grpcEndToEndCases(b *testing.B) []interleave.Case {
	cases := []struct {
		name  string
		unary grpc.UnaryServerInterceptor
	}{{"bare", nil}, {"noop-interceptor", handlerOnly}}
	for _, q := range transportQuotas {
		for _, m := range grpcModes {
			cases = append(cases, struct {
				name  string
				unary grpc.UnaryServerInterceptor
			}{q.Name + "/" + m.name, mustInterceptor(grpclimit.New(newLimiter(b, q.Rate), m.opts...)).Unary()})
		}
		cases = append(cases, struct {
			name  string
			unary grpc.UnaryServerInterceptor
		}{q.Name + "/grpclimit-v0.1", mustV01(grpclimitv01.New(newLimiter(b, q.Rate))).Unary()})
	}
	var calls []interleave.Case
	for _, c := range cases {
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
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		client, ctx := testpb.NewTestServiceClient(conn), context.Background()
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			b.Fatal(err) // connects
		}
		calls = append(calls, interleave.Case{Name: c.name, Call: func() error {
			_, err := client.EmptyCall(ctx, &testpb.Empty{})
			return err
		}})
	}
	return calls
}

func benchHTTPEndToEnd(b *testing.B) {
	handlers := []struct {
		name string
		h    http.Handler
	}{{"bare", okHandler}}
	for _, q := range transportQuotas {
		mw, err := floodgate.NewMiddleware(newLimiter(b, q.Rate))
		if err != nil {
			b.Fatal(err)
		}
		handlers = append(handlers, struct {
			name string
			h    http.Handler
		}{q.Name + "/middleware", mw(okHandler)})
	}
	var calls []interleave.Case
	for _, c := range handlers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: c.h}
		go func() { _ = srv.Serve(ln) }() // returns when Close is called
		b.Cleanup(func() { _ = srv.Close() })
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		b.Cleanup(client.CloseIdleConnections)
		url := "http://" + ln.Addr().String() + "/"
		calls = append(calls, interleave.Case{Name: c.name, Call: func() error {
			resp, err := client.Get(url)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}})
	}
	interleave.Bench(b, calls, 100)
}
