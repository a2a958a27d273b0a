package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// clock is a fake clock for the limiters.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time           { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *clock) option() floodgate.Option { return floodgate.WithClock(c.now) }

func bucket(t testing.TB, r floodgate.Rate, opts ...floodgate.Option) *floodgate.TokenBucket {
	t.Helper()
	l, err := floodgate.NewTokenBucket(r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// must returns v, or panics on a construction error (a test's mistake).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

const (
	echoProcedure   = "/test.v1.TestService/Echo"
	streamProcedure = "/test.v1.TestService/Stream"
)

// service counts the calls that reach its handlers. Echo answers its
// request, fails with the code named by a request "code:N", and panics
// on "panic".
type service struct{ echoes, streams atomic.Int32 }

func (s *service) echo(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	s.echoes.Add(1)
	switch v := req.Msg.GetValue(); v {
	case "panic":
		panic("handler panics")
	case "not found":
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such thing"))
	}
	return connect.NewResponse(req.Msg), nil
}

func (s *service) stream(_ context.Context, req *connect.Request[wrapperspb.StringValue], ss *connect.ServerStream[wrapperspb.StringValue]) error {
	s.streams.Add(1)
	return ss.Send(req.Msg)
}

// serve starts a real HTTP/2 server (TLS, as gRPC needs HTTP/2) with the
// interceptor on both handlers.
func serve(t *testing.T, lim *connectlimit.Interceptor) (*httptest.Server, *service) {
	t.Helper()
	svc := &service{}
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure, svc.echo, connect.WithInterceptors(lim)))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure, svc.stream, connect.WithInterceptors(lim)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a panicking handler is logged by net/http
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, svc
}

// protocols are connect's three, as client options.
var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{connect.ProtocolConnect, nil},
	{connect.ProtocolGRPC, []connect.ClientOption{connect.WithGRPC()}},
	{connect.ProtocolGRPCWeb, []connect.ClientOption{connect.WithGRPCWeb()}},
}

func echoClient(srv *httptest.Server, opts []connect.ClientOption) *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue] {
	return connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+echoProcedure, opts...)
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func retryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration(), true
			}
		}
	}
	return 0, false
}

// TestThreeProtocols: with a real connect-go client on the Connect,
// gRPC and gRPC-Web protocols against a real HTTP/2 server, a denial is
// CodeResourceExhausted with a RetryInfo detail holding the exact wait,
// the quota and Retry-After in its metadata, and on the gRPC protocols
// grpc-retry-pushback-ms; waiting it out (on the fake clock) succeeds.
// An allowed call carries no quota header by default, and under
// WithQuotaOnAllowed the quota headers the HTTP middleware would send. A
// stream is decided once, when it opens.
func TestThreeProtocols(t *testing.T) {
	for _, p := range protocols {
		for _, quotaOnAllowed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/quota-on-allowed=%v", p.name, quotaOnAllowed), func(t *testing.T) {
				var opts []connectlimit.Option
				if quotaOnAllowed {
					opts = append(opts, connectlimit.WithQuotaOnAllowed())
				}
				threeProtocols(t, p.name, p.opts, quotaOnAllowed, opts...)
			})
		}
	}
}

func threeProtocols(t *testing.T, protocol string, clientOpts []connect.ClientOption, quotaOnAllowed bool, opts ...connectlimit.Option) {
	clk := newClock()
	lim := must(connectlimit.New(bucket(t, floodgate.Rate{Limit: 2, Period: time.Minute}, clk.option()), opts...))
	srv, svc := serve(t, lim)
	client := echoClient(srv, clientOpts)
	for i, want := range []string{`"default";r=1;t=30`, `"default";r=0;t=60`} {
		wantPolicy := `"default";q=2;w=60`
		if !quotaOnAllowed {
			want, wantPolicy = "", ""
		}
		resp, err := client.CallUnary(ctxTimeout(t), connect.NewRequest(wrapperspb.String("hi")))
		if err != nil || resp.Header().Get("RateLimit") != want || resp.Header().Get("RateLimit-Policy") != wantPolicy ||
			resp.Trailer().Get("RateLimit") != "" || resp.Trailer().Get("RateLimit-Policy") != "" {
			t.Fatalf("call %d: %v, headers %v, trailers %v; want RateLimit %q in the headers", i, err, resp.Header(), resp.Trailer(), want)
		}
	}
	_, err := client.CallUnary(ctxTimeout(t), connect.NewRequest(wrapperspb.String("hi")))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("third call: %v, want CodeResourceExhausted", err)
	}
	if d, ok := retryDelay(err); !ok || d != 30*time.Second {
		t.Errorf("RetryInfo %v (present %v), want exactly 30s", d, ok)
	}
	meta := ce.Meta()
	if meta.Get("RateLimit") != `"default";r=0;t=30` || meta.Get("Retry-After") != "30" || meta.Get("RateLimit-Policy") != `"default";q=2;w=60` {
		t.Errorf("denial metadata %v: want the quota and Retry-After 30", meta)
	}
	pushback := meta.Get("Grpc-Retry-Pushback-Ms")
	if wantGRPC := protocol != connect.ProtocolConnect; wantGRPC && pushback != "30000" || !wantGRPC && pushback != "" {
		t.Errorf("grpc-retry-pushback-ms %q on %s", pushback, protocol)
	}
	clk.advance(30 * time.Second)
	if _, err := client.CallUnary(ctxTimeout(t), connect.NewRequest(wrapperspb.String("hi"))); err != nil {
		t.Errorf("after the wait: %v", err)
	}
	if got := svc.echoes.Load(); got != 3 {
		t.Errorf("handler ran %d times, want 3", got)
	}

	stream := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+streamProcedure, clientOpts...)
	clk.advance(time.Minute)
	for i, wantOK := range []bool{true, true, false} {
		ss, err := stream.CallServerStream(ctxTimeout(t), connect.NewRequest(wrapperspb.String("s")))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for ss.Receive() {
			got++
		}
		err = ss.Err()
		quotaSent := ss.ResponseHeader().Get("RateLimit-Policy") != ""
		if wantOK && (err != nil || got != 1 || quotaSent != quotaOnAllowed) || !wantOK && connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("stream %d: %d messages, %v, headers %v; want allowed %v, quota sent %v", i, got, err, ss.ResponseHeader(), wantOK, quotaOnAllowed && wantOK)
		}
		_ = ss.Close()
	}
	if got := svc.streams.Load(); got != 2 {
		t.Errorf("stream handler ran %d times, want 2", got)
	}
}

// TestCountCodesWithAPanic counts only the calls that end with
// CodeNotFound, and a handler that panics: with 2 units, successful calls
// are free, the two that count spend the quota, then every call is
// denied before its handler runs.
func TestCountCodesWithAPanic(t *testing.T) {
	lim := must(connectlimit.New(bucket(t, floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option()),
		connectlimit.WithCountCodes(func(c connect.Code) bool { return c == connect.CodeNotFound })))
	srv, svc := serve(t, lim)
	client := echoClient(srv, nil)
	for i, s := range []struct {
		msg  string
		code connect.Code // 0: success
		fail bool         // any failure (the panic cuts the connection)
	}{{"ok", 0, false}, {"ok", 0, false}, {"ok", 0, false}, {"not found", connect.CodeNotFound, true}, {"panic", 0, true},
		{"ok", connect.CodeResourceExhausted, true}, {"not found", connect.CodeResourceExhausted, true}} {
		_, err := client.CallUnary(ctxTimeout(t), connect.NewRequest(wrapperspb.String(s.msg)))
		switch {
		case !s.fail && err != nil, s.code > 0 && connect.CodeOf(err) != s.code, s.fail && err == nil:
			t.Fatalf("step %d (%s): %v, want code %v", i, s.msg, err, s.code)
		}
	}
	if got := svc.echoes.Load(); got != 5 {
		t.Errorf("handler ran %d times, want 5", got)
	}
}
