package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// clock is a fake clock for the limiters: tests advance it by the wait a
// denial names instead of sleeping.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time           { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *clock) option() floodgate.Option { return floodgate.WithClock(c.now) }

// countingHealth is the health service, counting the calls that reach it.
type countingHealth struct {
	*health.Server
	checks, watches atomic.Int32
}

func (h *countingHealth) Check(ctx context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.checks.Add(1)
	return h.Server.Check(ctx, in)
}

func (h *countingHealth) Watch(in *healthpb.HealthCheckRequest, s healthgrpc.Health_WatchServer) error {
	h.watches.Add(1)
	return h.Server.Watch(in, s)
}

// serve starts a real gRPC server on a loopback TCP port with the
// interceptors, and returns a client connected to it.
func serve(t *testing.T, lim *grpclimit.Interceptors) (healthgrpc.HealthClient, *countingHealth) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	svc := &countingHealth{Server: health.NewServer()}
	healthgrpc.RegisterHealthServer(srv, svc)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close() // the test is over; a close error changes nothing
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return healthgrpc.NewHealthClient(conn), svc
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// retryDelay returns the RetryInfo delay of a status error.
func retryDelay(t *testing.T, err error) (time.Duration, bool) {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// TestUnaryDenialRetryInfoAndRetry: a client over loopback TCP is denied
// with ResourceExhausted, reads the exact wait from RetryInfo, waits it
// out (on the fake clock) and succeeds; the quota metadata is the one the
// HTTP middleware sends for the same sequence, byte for byte.
func TestUnaryDenialRetryInfoAndRetry(t *testing.T) {
	clk := newClock()
	rate := floodgate.Rate{Limit: 2, Period: time.Minute}
	lim, err := floodgate.NewTokenBucket(rate, clk.option())
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serve(t, ic)

	// The same limit behind the HTTP middleware, on its own clock, for
	// the headers the metadata must repeat.
	httpClk := newClock()
	httpLim, err := floodgate.NewTokenBucket(rate, httpClk.option())
	if err != nil {
		t.Fatal(err)
	}
	httpMW, err := floodgate.NewMiddleware(httpLim)
	if err != nil {
		t.Fatal(err)
	}
	httpH := httpMW(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	steps := []struct {
		code    codes.Code
		advance bool // wait out the RetryInfo delay afterwards
	}{{codes.OK, false}, {codes.OK, false}, {codes.ResourceExhausted, true}, {codes.OK, false}, {codes.ResourceExhausted, false}}
	for i, s := range steps {
		var md metadata.MD
		_, err := client.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		if got := status.Code(err); got != s.code {
			t.Fatalf("step %d: code %v (%v), want %v", i, got, err, s.code)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "127.0.0.1:1"
		httpH.ServeHTTP(w, r)
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			want := w.Header().Values(name)
			got := md.Get(name) // metadata keys are lower case; Get folds
			if len(got) != len(want) || len(want) > 0 && got[0] != want[0] {
				t.Errorf("step %d: metadata %s = %q, HTTP header %q", i, name, got, want)
			}
		}
		if len(md.Get("ratelimit")) != 1 {
			t.Errorf("step %d: no ratelimit metadata: %v", i, md)
		}
		if s.code != codes.ResourceExhausted {
			continue
		}
		delay, ok := retryDelay(t, err)
		if !ok || delay != 30*time.Second {
			t.Fatalf("step %d: RetryInfo delay %v (present %v), want exactly 30s (2 per minute)", i, delay, ok)
		}
		if s.advance {
			clk.advance(delay)
			httpClk.advance(delay)
		}
	}
	if got := svc.checks.Load(); got != 3 {
		t.Errorf("handler ran %d times, want 3 (never for a denial)", got)
	}
}

// TestStreamLimited: streams are decided when they open.
func TestStreamLimited(t *testing.T) {
	clk := newClock()
	lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Hour}, clk.option())
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serve(t, ic)
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, err = stream.Recv()
		md, _ := stream.Header()
		cancel()
		if got := status.Code(err); got != want {
			t.Fatalf("stream %d: %v, want %v", i, err, want)
		}
		if len(md.Get("ratelimit-policy")) != 1 {
			t.Errorf("stream %d: quota metadata missing: %v", i, md)
		}
		if want == codes.ResourceExhausted {
			if d, ok := retryDelay(t, err); !ok || d != time.Hour {
				t.Errorf("stream %d: RetryInfo %v %v, want 1h", i, d, ok)
			}
		}
	}
	if got := svc.watches.Load(); got != 1 {
		t.Errorf("stream handler ran %d times, want 1", got)
	}
}

// TestKeys: the peer with the trusted-proxy rules of KeyByIP, a metadata
// value, the full method, and a combination.
func TestKeys(t *testing.T) {
	trusted, err := floodgate.KeyByIP(floodgate.TrustProxies(netip.MustParsePrefix("127.0.0.1/32")), floodgate.FromXForwardedFor())
	if err != nil {
		t.Fatal(err)
	}
	byPeer, err := floodgate.KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		md     []string // metadata pairs
		method string   // "check" or "list"
		code   codes.Code
	}
	xff := func(ip string) []string { return []string{"x-forwarded-for", "192.0.2.99, " + ip} }
	tests := []struct {
		name  string
		key   floodgate.KeyFunc
		calls []call
	}{
		{"trusted proxy: one quota per forwarded client", trusted, []call{
			{xff("198.51.100.1"), "check", codes.OK},
			{xff("198.51.100.1"), "check", codes.ResourceExhausted},
			{xff("198.51.100.2"), "check", codes.OK},
			{nil, "check", codes.OK}, // the proxy itself
		}},
		{"peer only: forwarding metadata ignored", byPeer, []call{
			{xff("198.51.100.1"), "check", codes.OK},
			{xff("198.51.100.2"), "check", codes.ResourceExhausted},
		}},
		{"metadata value", mustKey(floodgate.KeyByHeader("x-api-key")), []call{
			{[]string{"x-api-key", "k1"}, "check", codes.OK},
			{[]string{"x-api-key", "k1"}, "check", codes.ResourceExhausted},
			{[]string{"x-api-key", "k2"}, "check", codes.OK},
			{nil, "check", codes.InvalidArgument}, // no key: the caller's doing
		}},
		{"full method", grpclimit.KeyByFullMethod(), []call{
			{nil, "check", codes.OK},
			{nil, "check", codes.ResourceExhausted},
			{nil, "list", codes.OK},
		}},
		{"key and method", mustKey(floodgate.JoinKeys(mustKey(floodgate.KeyByHeader("x-api-key")), grpclimit.KeyByFullMethod())), []call{
			{[]string{"x-api-key", "k1"}, "check", codes.OK},
			{[]string{"x-api-key", "k1"}, "list", codes.OK},
			{[]string{"x-api-key", "k1"}, "check", codes.ResourceExhausted},
			{[]string{"x-api-key", "k2"}, "check", codes.OK},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option())
			if err != nil {
				t.Fatal(err)
			}
			ic, err := grpclimit.New(lim, grpclimit.WithKeyFunc(tt.key), grpclimit.WithFailOpen())
			if err != nil {
				t.Fatal(err)
			}
			client, _ := serve(t, ic)
			for i, c := range tt.calls {
				ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), c.md...)
				if c.method == "check" {
					_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
				} else {
					_, err = client.List(ctx, &healthpb.HealthListRequest{})
				}
				if got := status.Code(err); got != c.code {
					t.Errorf("call %d (%v %s): %v, want %v", i, c.md, c.method, err, c.code)
				}
			}
		})
	}
}

// failingLimiter fails every decision, as a store that is down does; it
// can cancel the caller's context first, as a client hanging up during
// the decision does.
type failingLimiter struct{ cancel context.CancelFunc }

var errStoreDown = errors.New("store down")

func (l failingLimiter) AllowN(ctx context.Context, _ string, _ int) (floodgate.Decision, error) {
	if l.cancel != nil {
		l.cancel()
		return floodgate.Decision{}, ctx.Err()
	}
	return floodgate.Decision{}, errStoreDown
}

// TestFailurePolicy: a failing limiter is Unavailable (fail closed) or
// lets the call through (fail open); a client-caused key error is
// InvalidArgument under both.
func TestFailurePolicy(t *testing.T) {
	noKey := mustKey(floodgate.KeyByHeader("x-api-key"))
	for _, tt := range []struct {
		name    string
		opts    []grpclimit.Option
		md      []string
		code    codes.Code
		handled int32
	}{
		{"fail closed", nil, nil, codes.Unavailable, 0},
		{"fail open", []grpclimit.Option{grpclimit.WithFailOpen()}, nil, codes.OK, 1},
		{"dry run", []grpclimit.Option{grpclimit.WithDryRun()}, nil, codes.OK, 1},
		{"no key, fail closed", []grpclimit.Option{grpclimit.WithKeyFunc(noKey)}, nil, codes.InvalidArgument, 0},
		{"no key, fail open", []grpclimit.Option{grpclimit.WithKeyFunc(noKey), grpclimit.WithFailOpen()}, nil, codes.InvalidArgument, 0},
		{"key too long, fail open", []grpclimit.Option{grpclimit.WithKeyFunc(noKey), grpclimit.WithFailOpen()},
			[]string{"x-api-key", strings.Repeat("k", 2000)}, codes.InvalidArgument, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var lim floodgate.Limiter = failingLimiter{}
			if tt.md != nil {
				// A real limiter, refusing the long key itself.
				tb, err := floodgate.NewTokenBucket(floodgate.PerMinute(10))
				if err != nil {
					t.Fatal(err)
				}
				lim = tb
			}
			ic, err := grpclimit.New(lim, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			client, svc := serve(t, ic)
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), tt.md...)
			_, err = client.Check(ctx, &healthpb.HealthCheckRequest{})
			if got := status.Code(err); got != tt.code {
				t.Errorf("%v, want %v", err, tt.code)
			}
			if got := svc.checks.Load(); got != tt.handled {
				t.Errorf("handler ran %d times, want %d", got, tt.handled)
			}
		})
	}
}

// TestCanceledClientNeverRuns: a call whose client has gone away ends
// with Canceled and never runs the handler, under fail-open too, whether
// it was gone before the decision or left during it.
func TestCanceledClientNeverRuns(t *testing.T) {
	for _, during := range []bool{false, true} {
		ctx, cancel := context.WithCancel(peer.NewContext(context.Background(),
			&peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}}))
		var lim floodgate.Limiter = failingLimiter{cancel: cancel}
		if !during {
			cancel()
			lim = failingLimiter{}
		}
		ic, err := grpclimit.New(lim, grpclimit.WithFailOpen())
		if err != nil {
			t.Fatal(err)
		}
		var ran bool
		_, err = ic.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
			ran = true
			return nil, nil
		})
		if status.Code(err) != codes.Canceled || ran {
			t.Errorf("cancelled during=%v: %v, handler ran %v; want Canceled and no run", during, err, ran)
		}
	}
}

// TestCountCodes counts only the calls that end with the given code.
func TestCountCodes(t *testing.T) {
	lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option())
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.New(lim, grpclimit.WithCountCodes(func(c codes.Code) bool { return c == codes.NotFound }))
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serve(t, ic)
	steps := []struct {
		service string
		code    codes.Code
	}{
		{"", codes.OK}, {"", codes.OK}, {"", codes.OK},
		{"unknown", codes.NotFound}, {"", codes.OK}, {"unknown", codes.NotFound},
		{"", codes.ResourceExhausted}, {"unknown", codes.ResourceExhausted},
	}
	for i, s := range steps {
		_, err := client.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{Service: s.service})
		if got := status.Code(err); got != s.code {
			t.Fatalf("step %d (%q): %v, want %v", i, s.service, err, s.code)
		}
	}
	if got := svc.checks.Load(); got != 6 {
		t.Errorf("handler ran %d times, want 6", got)
	}
}

// TestRoutesAndPolicies: NewRoutes limits by method with ServeMux
// patterns over full methods, and NewPolicy by a selector.
func TestRoutesAndPolicies(t *testing.T) {
	byIP, err := floodgate.KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	checks, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := floodgate.NewRoutes(floodgate.Route{Pattern: "POST /grpc.health.v1.Health/Check",
		Policies: []floodgate.Policy{{Name: "check", Limiter: checks, Key: byIP}}})
	if err != nil {
		t.Fatal(err)
	}
	ic, err := grpclimit.NewRoutes(rt)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serve(t, ic)
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		var md metadata.MD
		_, err := client.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		if status.Code(err) != want || len(md.Get("ratelimit-policy")) != 1 || md.Get("ratelimit-policy")[0][:7] != `"check"` {
			t.Errorf("check %d: %v, metadata %v; want %v under policy \"check\"", i, err, md, want)
		}
	}
	for range 3 { // List has no route: not limited
		if _, err := client.List(ctxTimeout(t), &healthpb.HealthListRequest{}); err != nil {
			t.Errorf("List: %v", err)
		}
	}

	users, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option())
	if err != nil {
		t.Fatal(err)
	}
	others, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option())
	if err != nil {
		t.Fatal(err)
	}
	sel, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "user", Limiter: users, Key: mustKey(floodgate.KeyByHeader("x-user"))},
		floodgate.Policy{Name: "ip", Limiter: others, Key: byIP},
	)
	if err != nil {
		t.Fatal(err)
	}
	ic, err = grpclimit.NewPolicy(sel)
	if err != nil {
		t.Fatal(err)
	}
	client, _ = serve(t, ic)
	for i, c := range []struct {
		user string
		code codes.Code
	}{{"ann", codes.OK}, {"ann", codes.ResourceExhausted}, {"", codes.OK}, {"", codes.OK}, {"", codes.ResourceExhausted}} {
		ctx := ctxTimeout(t)
		if c.user != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-user", c.user)
		}
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != c.code {
			t.Errorf("selector call %d: %v, want %v", i, err, c.code)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	lim, err := floodgate.NewTokenBucket(floodgate.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := floodgate.NewPolicySelector(floodgate.Policy{Name: "p", Limiter: lim, Key: grpclimit.KeyByFullMethod()})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"nil option":  func() error { _, err := grpclimit.New(lim, nil); return err },
		"nil limiter": func() error { _, err := grpclimit.New(nil); return err },
		"twice": func() error {
			_, err := grpclimit.New(lim, grpclimit.WithFailOpen(), grpclimit.WithFailOpen())
			return err
		},
		"dry run and open": func() error {
			_, err := grpclimit.New(lim, grpclimit.WithDryRun(), grpclimit.WithFailOpen())
			return err
		},
		"key func on selector": func() error {
			_, err := grpclimit.NewPolicy(sel, grpclimit.WithKeyFunc(grpclimit.KeyByFullMethod()))
			return err
		},
		"nil skip":   func() error { _, err := grpclimit.New(lim, grpclimit.WithSkip(nil)); return err },
		"nil codes":  func() error { _, err := grpclimit.New(lim, grpclimit.WithCountCodes(nil)); return err },
		"zero cost":  func() error { _, err := grpclimit.New(lim, grpclimit.WithCost(0)); return err },
		"nil routes": func() error { _, err := grpclimit.NewRoutes(nil); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestSkip exempts a method from the limit.
func TestSkip(t *testing.T) {
	lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	ic, err := grpclimit.New(lim, grpclimit.WithSkip(func(_ context.Context, m string) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, m)
		return m == "/grpc.health.v1.Health/List"
	}))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serve(t, ic)
	for range 3 {
		if _, err := client.List(ctxTimeout(t), &healthpb.HealthListRequest{}); err != nil {
			t.Fatalf("skipped List: %v", err)
		}
	}
	if _, err := client.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Check(ctxTimeout(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second Check: %v, want ResourceExhausted", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 5 {
		t.Errorf("skip saw %v", seen)
	}
}

// mustKey returns kf, or panics (failing the test) with err: the key
// functions of these tests are built from constant arguments.
func mustKey(kf floodgate.KeyFunc, err error) floodgate.KeyFunc {
	if err != nil {
		panic(err)
	}
	return kf
}
