package grpclimit_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcDriver serves the conformance cases behind grpclimit on a real
// grpc-go server over loopback, with a recovery interceptor outside the
// limit (a panic becomes Internal after the limit has seen it go by).
type grpcDriver struct{}

func (grpcDriver) Name() string { return "gRPC" }

func (grpcDriver) Start(t *testing.T, s conformance.Setup) conformance.Client {
	byClient := must(grpclimit.KeyByMetadata("x-client"))
	key := func(c grpclimit.Call) (string, error) { return conformance.KeyFailure(byClient(c)) }
	opts := []grpclimit.Option{grpclimit.WithKeyFunc(key), grpclimit.WithDecisionHook(s.Hook)}
	if s.FailOpen {
		opts = append(opts, grpclimit.WithFailOpen())
	}
	if s.CountFailures {
		opts = append(opts, grpclimit.WithCountCodes(func(c codes.Code) bool { return c == codes.Unauthenticated }))
	}
	if s.CostAfter {
		opts = append(opts, grpclimit.WithCostAfter(grpclimit.CostReported))
	}
	if s.Wait != nil {
		opts = append(opts, grpclimit.WithWait(*s.Wait), grpclimit.WithWaitTimer(s.Timer))
	}
	if s.Stats != nil {
		opts = append(opts, grpclimit.WithGateStats(s.Stats))
	}
	lim, err := grpclimit.New(s.Limiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveCounting(t, lim, s.Ran)
	return grpcClient{testpb.NewTestServiceClient(srv.dial(t))}
}

type grpcClient struct{ c testpb.TestServiceClient }

// Do sends the step's action as the request's status: "fail" asks for
// Unauthenticated, "panic" for a panic.
func (g grpcClient) Do(ctx context.Context, st conformance.Step) conformance.Answer {
	if st.Client != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-client", st.Client)
	}
	if st.Cost > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-cost", strconv.Itoa(st.Cost))
	}
	req := &testpb.SimpleRequest{}
	switch st.Action {
	case conformance.Fail:
		req.ResponseStatus = &testpb.EchoStatus{Code: int32(codes.Unauthenticated), Message: "wrong password"}
	case conformance.Panic:
		req.ResponseStatus = &testpb.EchoStatus{Message: "panic"}
	}
	_, err := g.c.UnaryCall(ctx, req)
	a := conformance.Answer{Detail: status.Convert(err).String()}
	switch status.Code(err) {
	case codes.OK:
		a.Kind = conformance.OK
	case codes.Unauthenticated:
		a.Kind = conformance.Failed
	case codes.Internal:
		a.Kind = conformance.Panicked
	case codes.ResourceExhausted:
		a.Kind = conformance.Denied
		a.RetryAfter, _ = retryDelay(err)
	case codes.InvalidArgument:
		a.Kind = conformance.ClientError
	case codes.Unavailable:
		a.Kind = conformance.Unavailable
		if wait, ok := retryDelay(err); ok { // a busy service, not a failed limiter
			a.Kind, a.RetryAfter = conformance.Overloaded, wait
		}
	case codes.Canceled:
		a.Kind = conformance.HungUp
	}
	return a
}

// TestConformance runs the outcome cases every transport passes alike
// (internal/conformance) through grpclimit.
func TestConformance(t *testing.T) { conformance.Run(t, grpcDriver{}) }
