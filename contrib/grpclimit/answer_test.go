package grpclimit_test

import (
	"context"
	"fmt"
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
// be without the limit: the quota goes in the trailers of a failed call,
// so that its answer stays Trailers-Only, the only failure grpc-go's
// retry policy retries. (Quota metadata sent as headers ahead of the
// handler made it one attempt.) Every attempt is a call, and counted.
func TestHandlerFailureStaysRetryable(t *testing.T) {
	var decisions sync.Map
	ic := must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 100, Period: time.Hour}, newClock().option()),
		grpclimit.WithDecisionHook(func(e floodgate.DecisionEvent) { decisions.Store(e.Decision.Remaining, true) })))
	s := serveOn(t, ic)
	client := testpb.NewTestServiceClient(s.dial(t, grpc.WithDefaultServiceConfig(unavailableRetry)))
	var header, trailer metadata.MD
	req := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.Unavailable), Message: "backend down"}}
	_, err := client.UnaryCall(ctxTimeout(t), req, grpc.Header(&header), grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("UnaryCall: %v, want the handler's Unavailable", err)
	}
	if got := s.svc.unaries.Load(); got != 4 {
		t.Errorf("the handler ran %d times, want 4: the retry policy did not retry the handler's failure", got)
	}
	if len(header) != 0 {
		t.Errorf("a failed call sent headers %v: it must be Trailers-Only", header)
	}
	if got := trailer.Get("ratelimit"); len(got) != 1 || got[0] != `"default";r=96;t=144` {
		t.Errorf("trailer ratelimit = %q, want the last attempt's quota", got)
	}
	for r := 96; r <= 99; r++ {
		if _, ok := decisions.Load(r); !ok {
			t.Errorf("no decision left %d units: each attempt must be counted", r)
		}
	}
}

// TestQuotaWhenHeadersAreGone: the quota of an allowed call is sent with
// its response headers once the handler returns; where the headers have
// gone already (the handler sent them, or another limit inside this one
// did), it goes in the trailers, and the client still gets every value.
func TestQuotaWhenHeadersAreGone(t *testing.T) {
	newLimit := func(name string) *grpclimit.Interceptors {
		return must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 10, Period: time.Hour}, newClock().option()), grpclimit.WithPolicyName(name)))
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

// fixedLimiter allows every call with the same decision, so that every
// call sends the same quota values.
type fixedLimiter struct{}

func (fixedLimiter) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 30 * time.Second}, nil
}

// TestSharedQuotaMetadataUnderLoad: calls with the same quota values
// share one metadata map (see mdCache); concurrent calls, some whose
// handler sets or sends its own header (grpc-go then merges or copies
// the map), each get exactly their values, and the race detector sees
// nobody write into the shared map.
func TestSharedQuotaMetadataUnderLoad(t *testing.T) {
	s := serveWith(t, grpc.ChainUnaryInterceptor(must(grpclimit.New(fixedLimiter{})).Unary()))
	client := testpb.NewTestServiceClient(s.dial(t))
	const want = `"default";r=5;t=30`
	var wg sync.WaitGroup
	errs := make(chan error, 8*25)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				ctx := ctxTimeout(t)
				mode := [...]string{"", "set", "send"}[(g+i)%3]
				ctx = metadata.AppendToOutgoingContext(ctx, "x-set-header", mode)
				var header, trailer metadata.MD
				if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
					errs <- err
					return
				}
				got := append(header.Get("ratelimit"), trailer.Get("ratelimit")...)
				if len(got) != 1 || got[0] != want || len(header.Get("x-handler")) != min(len(mode), 1) {
					errs <- fmt.Errorf("call %d/%d (%q): ratelimit %q, header %v", g, i, mode, got, header)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
