package grpclimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestUnaryQuotaAndDenial: a denial carries no headers at all and
// everything in the trailers — ratelimit, ratelimit-policy, retry-after
// and grpc-retry-pushback-ms, the exact wait in ms — byte for byte what
// the HTTP middleware sends for the same sequence, with a RetryInfo
// detail holding the exact wait; waiting it out (on the fake clock)
// succeeds. An allowed call carries no quota metadata by default, and
// under WithQuotaOnAllowed the quota in its response headers, as the
// middleware's headers.
func TestUnaryQuotaAndDenial(t *testing.T) {
	for _, quotaOnAllowed := range []bool{false, true} {
		var opts []grpclimit.Option
		if quotaOnAllowed {
			opts = append(opts, grpclimit.WithQuotaOnAllowed())
		}
		unaryQuotaAndDenial(t, quotaOnAllowed, opts...)
	}
}

func unaryQuotaAndDenial(t *testing.T, quotaOnAllowed bool, opts ...grpclimit.Option) {
	clk := newClock()
	rate := floodgate.Rate{Limit: 2, Period: time.Minute}
	ic, err := grpclimit.New(bucket(t, rate, clk.option()), opts...)
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serve(t, ic)

	// The same limit behind the HTTP middleware, on its own clock, for
	// the headers the metadata must repeat.
	httpClk := newClock()
	httpMW, err := floodgate.NewMiddleware(bucket(t, rate, httpClk.option()))
	if err != nil {
		t.Fatal(err)
	}
	httpH := httpMW(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	steps := []struct {
		code    codes.Code
		advance bool // wait out the RetryInfo delay afterwards
	}{{codes.OK, false}, {codes.OK, false}, {codes.ResourceExhausted, true}, {codes.OK, false}, {codes.ResourceExhausted, false}}
	for i, s := range steps {
		var header, trailer metadata.MD
		_, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if got := status.Code(err); got != s.code {
			t.Fatalf("quota on allowed calls %v, step %d: code %v (%v), want %v", quotaOnAllowed, i, got, err, s.code)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "127.0.0.1:1"
		httpH.ServeHTTP(w, r)
		quota := header
		if s.code == codes.ResourceExhausted {
			if len(header) != 0 {
				t.Errorf("step %d: a denial sent headers %v: it must be Trailers-Only", i, header)
			}
			quota = trailer
		}
		if s.code == codes.OK && !quotaOnAllowed {
			for _, md := range []metadata.MD{header, trailer} {
				for _, name := range []string{"ratelimit-policy", "ratelimit", "retry-after", "grpc-retry-pushback-ms"} {
					if got := md.Get(name); len(got) != 0 {
						t.Errorf("step %d: an allowed call sent %s %q by default", i, name, got)
					}
				}
			}
			continue
		}
		for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			want := w.Header().Values(name)
			got := quota.Get(name) // metadata keys are lower case; Get folds
			if len(got) != len(want) || len(want) > 0 && got[0] != want[0] {
				t.Errorf("quota on allowed calls %v, step %d: metadata %s = %q, HTTP header %q", quotaOnAllowed, i, name, got, want)
			}
		}
		if len(quota.Get("ratelimit")) != 1 {
			t.Errorf("step %d: no ratelimit metadata: header %v, trailer %v", i, header, trailer)
		}
		if s.code != codes.ResourceExhausted {
			if len(trailer.Get("grpc-retry-pushback-ms")) != 0 {
				t.Errorf("step %d: an allowed call carries a pushback: %v", i, trailer)
			}
			continue
		}
		delay, ok := retryDelay(err)
		if !ok || delay != 30*time.Second {
			t.Fatalf("step %d: RetryInfo delay %v (present %v), want exactly 30s (2 per minute)", i, delay, ok)
		}
		if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "30000" {
			t.Errorf("step %d: grpc-retry-pushback-ms %q, want [30000]", i, got)
		}
		if s.advance {
			clk.advance(delay)
			httpClk.advance(delay)
		}
	}
	if got := svc.empties.Load(); got != 3 {
		t.Errorf("handler ran %d times, want 3 (never for a denial)", got)
	}
}

// TestPushbackRoundsUp: a wait that is not a whole number of milliseconds
// is pushed back by the next millisecond, so that the retry finds the
// quota back; a cost no wait can cure is pushed back by -1 ("do not
// retry", gRFC A6) without a RetryInfo.
func TestPushbackRoundsUp(t *testing.T) {
	clk := newClock()
	// 3 per second: one unit every 333.33… ms.
	ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 3, Period: time.Second}, floodgate.WithBurst(1), clk.option()))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serve(t, ic)
	if _, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	var trailer metadata.MD
	_, err = client.EmptyCall(ctxTimeout(t), &testpb.Empty{}, grpc.Trailer(&trailer))
	delay, _ := retryDelay(err)
	if got := trailer.Get("grpc-retry-pushback-ms"); delay != 333333334 || len(got) != 1 || got[0] != "334" {
		t.Errorf("RetryInfo %v, pushback %q; want 333.333334ms and [334]", delay, got)
	}

	// A cost above the capacity is refused at construction; one that a
	// limiter reports it can never hold at decision time is answered so.
	exceeded, err := grpclimit.New(tooCostly{}, grpclimit.WithKeyFunc(grpclimit.KeyByFullMethod()))
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serve(t, exceeded)
	trailer = nil
	_, err = client.EmptyCall(ctxTimeout(t), &testpb.Empty{}, grpc.Trailer(&trailer))
	if _, ok := retryDelay(err); status.Code(err) != codes.ResourceExhausted || ok {
		t.Errorf("cost exceeded: %v (RetryInfo %v); want ResourceExhausted without RetryInfo", err, ok)
	}
	if got := trailer.Get("grpc-retry-pushback-ms"); len(got) != 1 || got[0] != "-1" {
		t.Errorf("cost exceeded: pushback %q, want [-1]", got)
	}
	if svc.empties.Load() != 0 {
		t.Error("the handler ran")
	}
}

// tooCostly reports every call as costing more than it can ever hold.
type tooCostly struct{}

func (tooCostly) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Limit: 1}, floodgate.ErrCostExceedsLimit
}

// TestStreamDecidedOnce: a stream is decided once, when it opens; its
// messages are not counted; a denied stream gets the denial, with the
// quota, in its trailers, without headers. An allowed stream carries no
// quota metadata by default, and the quota in its headers under
// WithQuotaOnAllowed.
func TestStreamDecidedOnce(t *testing.T) {
	for _, quotaOnAllowed := range []bool{false, true} {
		var opts []grpclimit.Option
		if quotaOnAllowed {
			opts = append(opts, grpclimit.WithQuotaOnAllowed())
		}
		ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()), opts...)
		if err != nil {
			t.Fatal(err)
		}
		client, svc := serve(t, ic)
		for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
			stream, err := client.StreamingOutputCall(ctxTimeout(t), &testpb.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = stream.Recv()
			if want == codes.OK {
				_, err = stream.Recv() // the end of the stream
			}
			header, _ := stream.Header()
			trailer := stream.Trailer()
			if got := status.Code(err); got != want && !(want == codes.OK && err != nil && err.Error() == "EOF") {
				t.Fatalf("stream %d: %v, want %v", i, err, want)
			}
			quota, wantQuota := header, quotaOnAllowed
			if want == codes.ResourceExhausted {
				quota, wantQuota = trailer, true
				if len(header) != 0 {
					t.Errorf("stream %d: denial sent headers %v", i, header)
				}
				if d, ok := retryDelay(err); !ok || d != time.Hour {
					t.Errorf("stream %d: RetryInfo %v %v, want 1h", i, d, ok)
				}
			}
			if got := len(quota.Get("ratelimit-policy")) + len(quota.Get("ratelimit")); got != 2 && wantQuota || got != 0 && !wantQuota {
				t.Errorf("quota on allowed calls %v, stream %d: quota metadata %v: header %v trailer %v", quotaOnAllowed, i, wantQuota, header, trailer)
			}
		}
		if got := svc.streams.Load(); got != 1 {
			t.Errorf("stream handler ran %d times, want 1", got)
		}
	}
}

// TestOptionErrors: every impossible configuration is refused at
// construction.
func TestOptionErrors(t *testing.T) {
	lim := bucket(t, floodgate.PerMinute(1))
	sel, err := floodgate.NewSelectorFor(grpclimit.Policy{Name: "p", Limiter: lim, Key: grpclimit.KeyByFullMethod()})
	if err != nil {
		t.Fatal(err)
	}
	route := func(m string) grpclimit.Route {
		return grpclimit.Route{Method: m, Policies: []grpclimit.Policy{{Name: "p", Limiter: lim, Key: grpclimit.KeyByFullMethod()}}}
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
		"quota on allowed, no headers": func() error {
			_, err := grpclimit.New(lim, grpclimit.WithHeaders(floodgate.HeadersNone), grpclimit.WithQuotaOnAllowed())
			return err
		},
		"quota on allowed twice": func() error {
			_, err := grpclimit.New(lim, grpclimit.WithQuotaOnAllowed(), grpclimit.WithQuotaOnAllowed())
			return err
		},
		"key func on selector": func() error {
			_, err := grpclimit.NewPolicy(sel, grpclimit.WithKeyFunc(grpclimit.KeyByFullMethod()))
			return err
		},
		"nil selector":     func() error { _, err := grpclimit.NewPolicy(nil); return err },
		"nil key func":     func() error { _, err := grpclimit.New(lim, grpclimit.WithKeyFunc(nil)); return err },
		"bad policy name":  func() error { _, err := grpclimit.New(lim, grpclimit.WithPolicyName("é")); return err },
		"nil skip":         func() error { _, err := grpclimit.New(lim, grpclimit.WithSkip(nil)); return err },
		"nil codes":        func() error { _, err := grpclimit.New(lim, grpclimit.WithCountCodes(nil)); return err },
		"zero cost":        func() error { _, err := grpclimit.New(lim, grpclimit.WithCost(0)); return err },
		"cost > capacity":  func() error { _, err := grpclimit.New(lim, grpclimit.WithCost(2)); return err },
		"count, no refund": func() error { _, err := grpclimit.New(noRefund{}, grpclimit.WithCountCodes(isNotFound)); return err },
		"no routes":        func() error { _, err := grpclimit.NewRoutes(nil); return err },
		"route twice":      func() error { _, err := grpclimit.NewRoutes([]grpclimit.Route{route("/"), route("/")}); return err },
		"route no policy": func() error {
			_, err := grpclimit.NewRoutes([]grpclimit.Route{{Method: "/a.B/C"}})
			return err
		},
		"KeyByMetadata empty":   func() error { _, err := grpclimit.KeyByMetadata(""); return err },
		"KeyByMetadata binary":  func() error { _, err := grpclimit.KeyByMetadata("x-token-bin"); return err },
		"KeyByMetadata pseudo":  func() error { _, err := grpclimit.KeyByMetadata(":authority"); return err },
		"KeyByIP untrusted xff": func() error { _, err := grpclimit.KeyByIP(floodgate.FromXForwardedFor()); return err },
		"JoinKeys none":         func() error { _, err := grpclimit.JoinKeys(); return err },
		"JoinKeys nil":          func() error { _, err := grpclimit.JoinKeys(grpclimit.KeyByFullMethod(), nil); return err },
	}
	for _, m := range []string{"", "a.B/C", "/a.B", "//C", "/a.B/C/D", "/a.B/C/"} {
		cases["route method "+m] = func() error { _, err := grpclimit.NewRoutes([]grpclimit.Route{route(m)}); return err }
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

func isNotFound(c codes.Code) bool { return c == codes.NotFound }

// noRefund is a limiter that cannot give units back.
type noRefund struct{}

func (noRefund) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 1, Remaining: 1}, nil
}

// TestSkipAndHealth: WithSkip exempts what it says, and the health
// service is exempt by its exact name only.
func TestSkipAndHealth(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ic, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()),
		grpclimit.WithKeyFunc(grpclimit.KeyByFullMethod()),
		grpclimit.WithSkip(func(_ context.Context, m string) bool {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, m)
			return m == "/grpc.testing.TestService/UnaryCall"
		}))
	if err != nil {
		t.Fatal(err)
	}
	unary := ic.Unary()
	call := func(method string) codes.Code {
		_, err := unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	for _, m := range []string{"/grpc.testing.TestService/UnaryCall", "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"} {
		for range 3 {
			if got := call(m); got != codes.OK {
				t.Errorf("%s: %v, want OK (exempt)", m, got)
			}
		}
	}
	// Not the health service, whatever the prefix says.
	for _, m := range []string{"/grpc.health.v1.Health/Check/x", "/grpc.health.v1.HealthX/Check", "/x.grpc.health.v1.Health/Check"} {
		if first, second := call(m), call(m); first != codes.OK || second != codes.ResourceExhausted {
			t.Errorf("%s: %v then %v, want OK then ResourceExhausted (limited)", m, first, second)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3+6 || strings.Contains(" "+strings.Join(seen, " ")+" ", " /grpc.health.v1.Health/Check ") {
		t.Errorf("skip saw %v: want the exempt method 3 times and each limited one twice, never the health service", seen)
	}

	limited, err := grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()),
		grpclimit.WithKeyFunc(grpclimit.KeyByFullMethod()), grpclimit.WithLimitHealth())
	if err != nil {
		t.Fatal(err)
	}
	unary = limited.Unary()
	if first, second := call("/grpc.health.v1.Health/Check"), call("/grpc.health.v1.Health/Check"); first != codes.OK || second != codes.ResourceExhausted {
		t.Errorf("WithLimitHealth: %v then %v, want OK then ResourceExhausted", first, second)
	}
}
