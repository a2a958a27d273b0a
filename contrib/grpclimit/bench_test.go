package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"github.com/floodgate-go/floodgate/internal/benchquota"
	"github.com/floodgate-go/floodgate/internal/interleave"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// benchPeers is the number of client addresses the direct benchmarks
// spread their calls over, each one a populated key of the limiter.
const benchPeers = 10_000

// benchQuotas are the steady and the draining quota (package
// benchquota): the docs quote the draining figures.
var benchQuotas = benchquota.Quotas

// benchModes are the ways of sending the quota the benchmarks compare:
// the default, the quota on allowed calls too, and none at all.
var benchModes = []struct {
	name string
	opts []grpclimit.Option
}{
	{"default", nil},
	{"quota-on-allowed", quotaOnAllowed},
	{"headers-none", []grpclimit.Option{grpclimit.WithHeaders(floodgate.HeadersNone)}},
}

// quotaOnAllowed sends the quota on allowed calls. (Before issue 31 the
// default did, and this was nil.)
var quotaOnAllowed = []grpclimit.Option{grpclimit.WithQuotaOnAllowed()}

// BenchmarkUnaryInterceptor measures what the interceptor itself adds to
// an allowed unary call, called as the server calls it, over 10,000
// peers (populated keys), against the handler alone in the same run:
// each quota in each mode. The transport stream does nothing, so what
// is counted is floodgate's own work, the metadata it builds included.
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
	for _, q := range benchQuotas {
		for _, m := range benchModes {
			lim := bucket(b, q.Rate)
			unary := must(grpclimit.New(lim, m.opts...)).Unary()
			for i, ctx := range ctxs { // populate the key set
				if _, err := unary(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
				// Each peer spends a different amount, so that under the
				// draining quota consecutive calls (of different peers)
				// see different values, as a peer's own calls do.
				if _, err := lim.AllowN(ctx, net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), i); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(q.Name+"/"+m.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := range b.N {
					if _, err := unary(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// nopStream stands in for the server's transport stream, so that
// SetHeader and SendHeader succeed as on a real server.
type nopStream struct{}

func (nopStream) Method() string               { return "/grpc.testing.TestService/EmptyCall" }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }

// serverCase is one way of serving the benchmarks' calls.
type serverCase struct {
	name string
	opts []grpc.ServerOption
}

// serverCases are the servers the end-to-end benchmarks call: a bare
// one; one with an interceptor that only calls the handler (what
// grpc-go costs for any interceptor); the same sending two metadata
// keys of the quota's length as the handler returns — from one map
// shared by every call, from a new map a call, and from a new map a
// call with a value that changes on every call, taken from values made
// beforehand (what grpc-go charges for carrying two keys, without and
// with the map a call whose values change must make, and for a value
// its HPACK tables have not seen) — and the limited ones, each quota in
// each mode.
func serverCases(b *testing.B) []serverCase {
	noop := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	policy, limit := []string{`"default";q=16777216;w=1`}, []string{`"default";r=16777215;t=1`}
	shared := metadata.MD{"ratelimit-policy": policy, "ratelimit": limit}
	changing := make([][]string, 1<<16)
	for i := range changing {
		changing[i] = []string{fmt.Sprintf(`"default";r=%d;t=%d`, 16777215-i, 1+i/8)}
	}
	var turn atomic.Uint32
	sending := func(md func() metadata.MD) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			_ = grpc.SendHeader(ctx, md()) // the benchmark reads the header back
			return resp, err
		}
	}
	cases := []serverCase{
		{"bare", nil},
		{"noop-interceptor", []grpc.ServerOption{grpc.ChainUnaryInterceptor(noop)}},
		{"two-keys-shared-map", []grpc.ServerOption{grpc.ChainUnaryInterceptor(sending(func() metadata.MD { return shared }))}},
		{"two-keys-new-map", []grpc.ServerOption{grpc.ChainUnaryInterceptor(sending(func() metadata.MD {
			return metadata.MD{"ratelimit-policy": policy, "ratelimit": limit}
		}))}},
		{"two-keys-new-map-changing", []grpc.ServerOption{grpc.ChainUnaryInterceptor(sending(func() metadata.MD {
			return metadata.MD{"ratelimit-policy": policy, "ratelimit": changing[turn.Add(1)%uint32(len(changing))]}
		}))}},
	}
	for _, q := range benchQuotas {
		for _, m := range benchModes {
			ic := must(grpclimit.New(bucket(b, q.Rate), m.opts...))
			cases = append(cases, serverCase{q.Name + "/" + m.name, []grpc.ServerOption{grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream())}})
		}
	}
	return cases
}

// BenchmarkUnaryServer measures an allowed unary call end to end, a real
// grpc-go client calling a real server over loopback TCP, on each of
// serverCases, one after the other. Besides wall time, each reports the
// process's CPU time per call (cpu-ns/op, client and server together),
// which does not count the time spent waiting for a core on a shared
// machine; BenchmarkUnaryOverhead sets them against each other in
// interleaved rounds, which a drifting load cannot tilt.
func BenchmarkUnaryServer(b *testing.B) {
	for _, c := range serverCases(b) {
		b.Run(c.name, func(b *testing.B) {
			client := benchServer(b, c.opts...)
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

// BenchmarkUnaryOverhead measures the calls of BenchmarkUnaryServer in
// interleaved rounds (package interleave): one client for each of
// serverCases, called in turn 100 calls at a time, so that the load of
// a shared machine, which drifts over seconds, weighs on all alike. For
// each case it reports, over the bare server, the median of the rounds'
// differences in CPU time per call (<case>-cpu-ns/call, client and
// server together; its quartiles <case>-cpu-q1-ns/call and
// <case>-cpu-q3-ns/call) and the allocations per call
// (<case>-allocs/call, exact). Run it with -benchtime 20000x or more:
// b.N calls of each case. One client's calls, one after the other,
// leave the cores idle between a call and its answer; on an idle
// machine the runtime's spinning there is most of a call's CPU time and
// varies by tens of µs between rounds: BenchmarkUnaryOverheadSaturated
// resolves less.
func BenchmarkUnaryOverhead(b *testing.B) {
	interleave.Bench(b, overheadCases(b), 100)
}

// saturatedCallers and saturatedBatch are how BenchmarkUnaryOverheadSaturated
// calls each server: 32 calls in flight on its connection, 1,000 calls a
// batch. 32 callers are many times what 2 cores can serve at once
// (base-cores says whether they kept them busy); a batch of 1,000 makes
// its ends, where fewer calls are in flight, a small part of it.
const (
	saturatedCallers = 32
	saturatedBatch   = 1000
)

// BenchmarkUnaryOverheadSaturated measures the cases of
// BenchmarkUnaryOverhead with 32 goroutines calling each server at once
// over its one connection (interleave.RunSaturated), so that every core
// stays busy and a round's CPU time is the calls' work, not the
// runtime's spinning between calls; each case's batch runs between two
// of the bare server's, in a new random order each round, and is set
// against their mean. It reports the same metrics, and base-cores, the cores the
// process kept busy while the bare server ran. Run it with -benchtime
// 100000x (100 rounds of 1,000 calls).
func BenchmarkUnaryOverheadSaturated(b *testing.B) {
	interleave.BenchSaturated(b, overheadCases(b), saturatedBatch, saturatedCallers)
}

// overheadCases serves each of serverCases on a port of its own and
// returns a call of a connected client for each; the calls may be made
// from many goroutines at once.
func overheadCases(b *testing.B) []interleave.Case {
	ctx := context.Background()
	var cases []interleave.Case
	for _, c := range serverCases(b) {
		client := benchServer(b, c.opts...)
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			b.Fatal(err) // connects
		}
		cases = append(cases, interleave.Case{Name: c.name, Call: func() error {
			_, err := client.EmptyCall(ctx, &testpb.Empty{})
			return err
		}})
	}
	return cases
}
