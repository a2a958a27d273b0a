package connectlimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"github.com/floodgate-go/floodgate/internal/benchquota"
	"github.com/floodgate-go/floodgate/internal/interleave"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// benchQuotas are the steady and the draining quota (package
// benchquota): the docs quote the draining figures.
var benchQuotas = benchquota.Quotas

// benchModes are the ways of sending the quota the benchmarks compare:
// the default, the quota on allowed calls too, and none at all.
var benchModes = []struct {
	name string
	opts []connectlimit.Option
}{
	{"default", nil},
	{"quota-on-allowed", quotaOnAllowed},
	{"headers-none", []connectlimit.Option{connectlimit.WithHeaders(floodgate.HeadersNone)}},
}

// quotaOnAllowed sends the quota on allowed calls. (Before issue 31 the
// default did, and this was nil.)
var quotaOnAllowed = []connectlimit.Option{connectlimit.WithQuotaOnAllowed()}

// benchTransports are the wires the end-to-end benchmarks call over, on
// loopback without TLS: the Connect protocol over HTTP/1.1 and over
// HTTP/2 (h2c), and the gRPC protocol over h2c.
var benchTransports = []struct {
	name string
	h2c  bool
	opts []connect.ClientOption
}{
	{"connect-http1", false, nil},
	{"connect-h2c", true, nil},
	{"grpc-h2c", true, []connect.ClientOption{connect.WithGRPC()}},
}

// handlerCase is one way of serving the benchmarks' calls.
type handlerCase struct {
	name string
	opts []connect.HandlerOption
}

// handlerCases are the handlers the benchmarks call: a bare one; one
// with an interceptor that only calls the handler; the same setting two
// headers of the quota's length on the response, shared values, once
// the same on every call and once one that changes on every call, taken
// from values made beforehand (what connect-go and net/http charge for
// carrying two headers, and for a value HTTP/2's HPACK tables have not
// seen); and the limited ones, each quota in each mode.
func handlerCases(b *testing.B) []handlerCase {
	policy, limit := []string{`"default";q=16777216;w=1`}, []string{`"default";r=16777215;t=1`}
	changing := make([][]string, 1<<16)
	for i := range changing {
		changing[i] = []string{fmt.Sprintf(`"default";r=%d;t=%d`, 16777215-i, 1+i/8)}
	}
	var turn atomic.Uint32
	twoHeaders := func(value func() []string) connect.UnaryInterceptorFunc {
		return func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				resp, err := next(ctx, req)
				if err == nil {
					resp.Header()["Ratelimit-Policy"], resp.Header()["Ratelimit"] = policy, value()
				}
				return resp, err
			}
		}
	}
	cases := []handlerCase{
		{"bare", nil},
		{"noop-interceptor", []connect.HandlerOption{connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc { return next }))}},
		{"two-headers", []connect.HandlerOption{connect.WithInterceptors(twoHeaders(func() []string { return limit }))}},
		{"two-headers-changing", []connect.HandlerOption{connect.WithInterceptors(twoHeaders(func() []string {
			return changing[turn.Add(1)%uint32(len(changing))]
		}))}},
	}
	for _, q := range benchQuotas {
		for _, m := range benchModes {
			lim := must(connectlimit.New(bucket(b, q.Rate), m.opts...))
			cases = append(cases, handlerCase{q.Name + "/" + m.name, []connect.HandlerOption{connect.WithInterceptors(lim)}})
		}
	}
	return cases
}

// BenchmarkUnaryServer measures an allowed unary call end to end, a real
// connect-go client calling a real server over loopback TCP, on each
// transport and each of handlerCases, one after the other;
// BenchmarkUnaryOverhead sets them against each other in interleaved
// rounds, which a drifting load cannot tilt.
func BenchmarkUnaryServer(b *testing.B) {
	for _, tr := range benchTransports {
		for _, c := range handlerCases(b) {
			b.Run(tr.name+"/"+c.name, func(b *testing.B) {
				call := benchClient(b, tr.h2c, tr.opts, c.opts)
				if err := call(); err != nil {
					b.Fatal(err) // connects
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkUnaryOverhead measures the calls of BenchmarkUnaryServer in
// interleaved rounds (package interleave), one transport at a time: one
// client for each of handlerCases, called in turn 100 calls at a time.
// For each case it reports, over the bare handler, the median of the
// rounds' differences in CPU time per call (<case>-cpu-ns/call, client
// and server together) and the allocations per call
// (<case>-allocs/call, exact). Run it with -benchtime 20000x or more.
func BenchmarkUnaryOverhead(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			var cases []interleave.Case
			for _, c := range handlerCases(b) {
				call := benchClient(b, tr.h2c, tr.opts, c.opts)
				if err := call(); err != nil {
					b.Fatal(err) // connects
				}
				cases = append(cases, interleave.Case{Name: c.name, Call: call})
			}
			interleave.Bench(b, cases, 100)
		})
	}
}

// benchClient serves the echo procedure with opts on a loopback port,
// over HTTP/1.1 and, with h2c, unencrypted HTTP/2, and returns a call of
// a connect-go client with clientOpts.
func benchClient(b *testing.B, h2c bool, clientOpts []connect.ClientOption, opts []connect.HandlerOption) func() error {
	svc := &service{}
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure, svc.echo, opts...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: protocols, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }() // returns when Close is called
	b.Cleanup(func() { _ = srv.Close() })
	transport := &http.Transport{MaxIdleConnsPerHost: 1, Protocols: new(http.Protocols)}
	if h2c {
		transport.Protocols.SetUnencryptedHTTP2(true)
	} else {
		transport.Protocols.SetHTTP1(true)
	}
	b.Cleanup(transport.CloseIdleConnections)
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: transport}, "http://"+ln.Addr().String()+echoProcedure, clientOpts...)
	req := connect.NewRequest(wrapperspb.String("hi"))
	ctx := context.Background()
	return func() error {
		_, err := client.CallUnary(ctx, req)
		return err
	}
}
