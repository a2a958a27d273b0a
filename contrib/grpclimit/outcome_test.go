package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

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
// lets the call through without quota metadata (fail open, dry run); a
// client-caused key error is InvalidArgument under fail-open too, and a
// misconfigured key function Internal.
func TestFailurePolicy(t *testing.T) {
	noKey := must(grpclimit.KeyByMetadata("x-api-key"))
	misconfigured := grpclimit.KeyFunc(func(grpclimit.Call) (string, error) {
		return "", floodgate.ErrInvalidOption
	})
	for _, tt := range []struct {
		name    string
		opts    []grpclimit.Option
		code    codes.Code
		handled int32
	}{
		{"fail closed", nil, codes.Unavailable, 0},
		{"fail open", []grpclimit.Option{grpclimit.WithFailOpen()}, codes.OK, 1},
		{"dry run", []grpclimit.Option{grpclimit.WithDryRun()}, codes.OK, 1},
		{"no key, fail closed", []grpclimit.Option{grpclimit.WithKeyFunc(noKey)}, codes.InvalidArgument, 0},
		{"no key, fail open", []grpclimit.Option{grpclimit.WithKeyFunc(noKey), grpclimit.WithFailOpen()}, codes.InvalidArgument, 0},
		{"misconfigured, fail open", []grpclimit.Option{grpclimit.WithKeyFunc(misconfigured), grpclimit.WithFailOpen()}, codes.Internal, 0},
	} {
		ic := must(grpclimit.New(failingLimiter{}, tt.opts...))
		client, svc := serve(t, ic)
		var header metadata.MD
		_, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{}, grpc.Header(&header))
		if got := status.Code(err); got != tt.code {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.code)
		}
		if got := svc.empties.Load(); got != tt.handled {
			t.Errorf("%s: handler ran %d times, want %d", tt.name, got, tt.handled)
		}
		if len(header.Get("ratelimit")) != 0 {
			t.Errorf("%s: quota metadata %v without a decision", tt.name, header)
		}
	}
}

// TestHungUpClientNeverRuns: a call whose client goes away while the
// limiter decides (the limiter failing with the cancelled context) ends
// with Canceled and never runs the handler, under fail-open and dry-run
// too, unary or stream.
func TestHungUpClientNeverRuns(t *testing.T) {
	for _, opt := range []grpclimit.Option{nil, grpclimit.WithFailOpen(), grpclimit.WithDryRun()} {
		ctx, cancel := context.WithCancel(peer.NewContext(context.Background(),
			&peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5000}}))
		var opts []grpclimit.Option
		if opt != nil {
			opts = append(opts, opt)
		}
		ic := must(grpclimit.New(failingLimiter{cancel: cancel}, opts...))
		var ran bool
		_, err := ic.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
			ran = true
			return nil, nil
		})
		if status.Code(err) != codes.Canceled || ran {
			t.Errorf("unary: %v, handler ran %v; want Canceled and no run", err, ran)
		}
		err = ic.Stream()(nil, fakeStream{ctx}, &grpc.StreamServerInfo{FullMethod: "/svc/S"}, func(any, grpc.ServerStream) error {
			ran = true
			return nil
		})
		if status.Code(err) != codes.Canceled || ran {
			t.Errorf("stream: %v, handler ran %v; want Canceled and no run", err, ran)
		}
	}
}

// fakeStream is a server stream with a context and nothing else.
type fakeStream struct{ ctx context.Context }

func (s fakeStream) Context() context.Context   { return s.ctx }
func (fakeStream) SetHeader(metadata.MD) error  { return nil }
func (fakeStream) SendHeader(metadata.MD) error { return nil }
func (fakeStream) SetTrailer(metadata.MD)       {}
func (fakeStream) SendMsg(any) error            { return nil }
func (fakeStream) RecvMsg(any) error            { return nil }

// TestCountCodesWithAPanic counts only the calls that end with NotFound,
// and a handler that panics, whatever it would have answered: with 2
// units, OK calls are free, the two that count spend the quota, and then
// every call is denied before its handler runs.
func TestCountCodesWithAPanic(t *testing.T) {
	ic := must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option()),
		grpclimit.WithCountCodes(isNotFound)))
	client, svc := serve(t, ic)
	req := func(code codes.Code, msg string) *testpb.SimpleRequest {
		return &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(code), Message: msg}}
	}
	steps := []struct {
		req  *testpb.SimpleRequest
		code codes.Code
	}{
		{&testpb.SimpleRequest{}, codes.OK}, {&testpb.SimpleRequest{}, codes.OK}, {&testpb.SimpleRequest{}, codes.OK},
		{req(codes.NotFound, "no"), codes.NotFound},
		{req(codes.OK, "panic"), codes.Internal}, // counted: the second unit
		{&testpb.SimpleRequest{}, codes.ResourceExhausted},
		{req(codes.NotFound, "no"), codes.ResourceExhausted},
	}
	for i, s := range steps {
		_, err := client.UnaryCall(ctxTimeout(t), s.req)
		if got := status.Code(err); got != s.code {
			t.Fatalf("step %d: %v, want %v", i, err, s.code)
		}
	}
	if got := svc.unaries.Load(); got != 5 {
		t.Errorf("handler ran %d times, want 5", got)
	}
}

// TestRoutesAndPolicies: NewRoutes limits a method, a service and the
// rest by their own policies, and sends each route's quota (here on
// allowed calls too: the option reaches every route); NewPolicy picks a
// policy per call.
func TestRoutesAndPolicies(t *testing.T) {
	byIP := must(grpclimit.KeyByIP())
	one := func() floodgate.Limiter {
		return bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option())
	}
	ic := must(grpclimit.NewRoutes([]grpclimit.Route{
		{Method: "/grpc.testing.TestService/EmptyCall", Policies: []grpclimit.Policy{{Name: "empty", Limiter: one(), Key: byIP}}},
		{Method: "/grpc.testing.TestService/", Policies: []grpclimit.Policy{{Name: "service", Limiter: one(), Key: byIP}}},
	}, grpclimit.WithQuotaOnAllowed()))
	client, _ := serve(t, ic)
	for i, want := range []struct {
		code   codes.Code
		policy string
	}{{codes.OK, `"empty"`}, {codes.ResourceExhausted, `"empty"`}} {
		var header, trailer metadata.MD
		_, err := client.EmptyCall(ctxTimeout(t), &testpb.Empty{}, grpc.Header(&header), grpc.Trailer(&trailer))
		got := append(header.Get("ratelimit-policy"), trailer.Get("ratelimit-policy")...)
		if status.Code(err) != want.code || len(got) != 1 || got[0][:len(want.policy)] != want.policy {
			t.Errorf("EmptyCall %d: %v, policy %v; want %v under %s", i, err, got, want.code, want.policy)
		}
	}
	if _, err := client.UnaryCall(ctxTimeout(t), &testpb.SimpleRequest{}); err != nil {
		t.Errorf("UnaryCall, the service's route: %v", err)
	}
	if _, err := client.UnaryCall(ctxTimeout(t), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second UnaryCall: %v, want ResourceExhausted", err)
	}

	sel := must(floodgate.NewSelectorFor(
		grpclimit.Policy{Name: "user", Limiter: one(), Key: must(grpclimit.KeyByMetadata("x-user"))},
		grpclimit.Policy{Name: "ip", Limiter: bucket(t, floodgate.Rate{Limit: 2, Period: time.Hour}, newClock().option()), Key: byIP},
	))
	client, _ = serve(t, must(grpclimit.NewPolicy(sel)))
	for i, c := range []struct {
		user string
		code codes.Code
	}{{"ann", codes.OK}, {"ann", codes.ResourceExhausted}, {"", codes.OK}, {"", codes.OK}, {"", codes.ResourceExhausted}} {
		ctx := ctxTimeout(t)
		if c.user != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-user", c.user)
		}
		if _, err := client.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != c.code {
			t.Errorf("selector call %d: %v, want %v", i, err, c.code)
		}
	}
}
