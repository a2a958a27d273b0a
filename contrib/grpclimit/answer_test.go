package grpclimit_test

import (
	"fmt"
	"slices"
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

// unavailableRetry is a standard retry policy for UNAVAILABLE, 4
// attempts, with backoffs short enough for a test.
const unavailableRetry = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService"}],
	"retryPolicy": {
		"maxAttempts": 4,
		"initialBackoff": "0.01s",
		"maxBackoff": "0.02s",
		"backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE"]
	}
}]}`

// TestHandlerFailureStaysRetryable: an allowed call whose handler fails
// with a code the client's retry policy retries is retried, as it would
// be without the limit: by default no quota goes with an allowed call,
// and under WithQuotaOnAllowed it goes in the trailers of a failed call,
// so that its answer stays Trailers-Only, the only failure grpc-go's
// retry policy retries. (Quota metadata sent as headers ahead of the
// handler made it one attempt.) Every attempt is a call, and counted.
func TestHandlerFailureStaysRetryable(t *testing.T) {
	for _, tt := range []struct {
		name         string
		opts         []grpclimit.Option
		trailerQuota []string
	}{
		{"default", nil, nil},
		{"quota on allowed calls", []grpclimit.Option{grpclimit.WithQuotaOnAllowed()}, []string{`"default";r=96;t=144`}},
	} {
		var decisions sync.Map
		opts := append(tt.opts, grpclimit.WithDecisionHook(func(e floodgate.DecisionEvent) { decisions.Store(e.Decision.Remaining, true) }))
		ic := must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 100, Period: time.Hour}, newClock().option()), opts...))
		s := serveOn(t, ic)
		client := testpb.NewTestServiceClient(s.dial(t, grpc.WithDefaultServiceConfig(unavailableRetry)))
		var header, trailer metadata.MD
		req := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable), Message: "backend down"}}
		_, err := client.UnaryCall(ctxTimeout(t), req, grpc.Header(&header), grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: UnaryCall: %v, want the handler's Unavailable", tt.name, err)
		}
		if got := s.svc.unaries.Load(); got != 4 {
			t.Errorf("%s: the handler ran %d times, want 4: the retry policy did not retry the handler's failure", tt.name, got)
		}
		if len(header) != 0 {
			t.Errorf("%s: a failed call sent headers %v: it must be Trailers-Only", tt.name, header)
		}
		if got := trailer.Get("ratelimit"); !slices.Equal(got, tt.trailerQuota) {
			t.Errorf("%s: trailer ratelimit = %q, want %q", tt.name, got, tt.trailerQuota)
		}
		for r := 96; r <= 99; r++ {
			if _, ok := decisions.Load(r); !ok {
				t.Errorf("%s: no decision left %d units: each attempt must be counted", tt.name, r)
			}
		}
	}
}

// TestQuotaWhenHeadersAreGone: under WithQuotaOnAllowed, the quota of an
// allowed call is sent with its response headers once the handler
// returns; where the headers have gone already (the handler sent them, or
// another limit inside this one did), it goes in the trailers, and the
// client still gets every value.
func TestQuotaWhenHeadersAreGone(t *testing.T) {
	newLimit := func(name string) *grpclimit.Interceptors {
		return must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 10, Period: time.Hour}, newClock().option()),
			grpclimit.WithPolicyName(name), grpclimit.WithQuotaOnAllowed()))
	}
	single := newLimit("one")
	outer, inner := newLimit("outer"), newLimit("inner")
	for _, tt := range []struct {
		name           string
		chain          []grpc.UnaryServerInterceptor
		setHeader      string // x-set-header: what the handler does
		header         map[string]string
		trailerLimit   string
		headerPolicies int
	}{
		{"handler sets no header", []grpc.UnaryServerInterceptor{single.Unary()}, "", map[string]string{"ratelimit": `"one";r=9;t=360`}, "", 1},
		{"handler sets a header", []grpc.UnaryServerInterceptor{single.Unary()}, "set", map[string]string{"ratelimit": `"one";r=8;t=720`, "x-handler": "set"}, "", 1},
		{"handler sends its header", []grpc.UnaryServerInterceptor{single.Unary()}, "send", map[string]string{"x-handler": "sent"}, `"one";r=7;t=1080`, 0},
		{"two limits", []grpc.UnaryServerInterceptor{outer.Unary(), inner.Unary()}, "", map[string]string{"ratelimit": `"inner";r=9;t=360`}, `"outer";r=9;t=360`, 1},
	} {
		client := testpb.NewTestServiceClient(serveChain(t, tt.chain).dial(t))
		ctx := ctxTimeout(t)
		if tt.setHeader != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-set-header", tt.setHeader)
		}
		var header, trailer metadata.MD
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for k, want := range tt.header {
			if got := header.Get(k); len(got) != 1 || got[0] != want {
				t.Errorf("%s: header %s = %q, want %q", tt.name, k, got, want)
			}
		}
		if got := len(header.Get("ratelimit-policy")); got != tt.headerPolicies {
			t.Errorf("%s: %d ratelimit-policy values in the header, want %d", tt.name, got, tt.headerPolicies)
		}
		got := trailer.Get("ratelimit")
		if tt.trailerLimit == "" && len(got) != 0 || tt.trailerLimit != "" && (len(got) != 1 || got[0] != tt.trailerLimit) {
			t.Errorf("%s: trailer ratelimit = %q, want %q", tt.name, got, tt.trailerLimit)
		}
	}
}

// serveChain is serveOn with the unary interceptors given, in order.
func serveChain(t *testing.T, chain []grpc.UnaryServerInterceptor) *server {
	t.Helper()
	return serveWith(t, grpc.ChainUnaryInterceptor(chain...))
}

// TestQuotaMetadataUnderLoad: under WithQuotaOnAllowed and a quota that
// drains, every call gets its own values: concurrent calls, some whose
// handler sets or sends its own header (grpc-go then merges or copies
// the map), each get exactly one ratelimit value, and no two calls the
// same — a value shared or overwritten between calls would show here,
// and to the race detector.
func TestQuotaMetadataUnderLoad(t *testing.T) {
	lim := bucket(t, floodgate.Rate{Limit: 1000, Period: time.Hour}, newClock().option())
	s := serveWith(t, grpc.ChainUnaryInterceptor(must(grpclimit.New(lim, grpclimit.WithQuotaOnAllowed())).Unary()))
	client := testpb.NewTestServiceClient(s.dial(t))
	const goroutines, calls = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*calls)
	values := make(chan string, goroutines*calls)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				ctx := ctxTimeout(t)
				mode := [...]string{"", "set", "send"}[(g+i)%3]
				ctx = metadata.AppendToOutgoingContext(ctx, "x-set-header", mode)
				var header, trailer metadata.MD
				if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
					errs <- err
					return
				}
				got := append(header.Get("ratelimit"), trailer.Get("ratelimit")...)
				if len(got) != 1 || len(header.Get("x-handler")) != min(len(mode), 1) {
					errs <- fmt.Errorf("call %d/%d (%q): ratelimit %q, header %v", g, i, mode, got, header)
					continue
				}
				values <- got[0]
			}
		})
	}
	wg.Wait()
	close(errs)
	close(values)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for v := range values {
		if seen[v] {
			t.Errorf("two calls got ratelimit %q: each call spends a unit, so each must see its own remaining count", v)
		}
		seen[v] = true
	}
	if len(seen) != goroutines*calls {
		t.Errorf("%d distinct values of %d calls", len(seen), goroutines*calls)
	}
	for r := 1000 - goroutines*calls; r < 1000; r++ {
		t3 := ((1000-r)*36 + 9) / 10 // 3.6 s a unit spent, rounded up
		if !seen[fmt.Sprintf(`"default";r=%d;t=%d`, r, t3)] {
			t.Errorf("no call saw r=%d", r)
		}
	}
}
