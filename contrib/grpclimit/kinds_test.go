package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// kindsService reports a unary call's cost in its trailer (the request's
// ResponseSize), and holds each streaming call until released, reporting
// the cost in the request's first ResponseParameters size through
// floodgate.ReportCost on the stream's context.
type kindsService struct {
	testpb.UnimplementedTestServiceServer
	entered chan struct{}
	release chan struct{}
}

func (s *kindsService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if n := in.GetResponseSize(); n > 0 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-cost", strconv.Itoa(int(n))))
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *kindsService) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	s.entered <- struct{}{}
	<-s.release
	if p := in.GetResponseParameters(); len(p) > 0 {
		_ = floodgate.ReportCost(ss.Context(), int(p[0].GetSize()))
	}
	return ss.Send(&testpb.StreamingOutputCallResponse{})
}

// serveKinds serves kindsService behind lim on loopback and returns a
// client.
func serveKinds(t *testing.T, lim *grpclimit.Interceptors) (testpb.TestServiceClient, *kindsService) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	svc := &kindsService{entered: make(chan struct{}, 8), release: make(chan struct{})}
	testpb.RegisterTestServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn), svc
}

// The cost a handler sets in a trailer is charged after the call: 25 on a
// quota of 10 an hour leaves the peer 15 in debt, and its next call is
// ResourceExhausted with a RetryInfo and a pushback that count the debt
// (16 tokens at 6 min each).
func TestCostAfterFromTrailer(t *testing.T) {
	clk := newClock()
	cost, err := grpclimit.CostTrailer("X-Cost")
	if err != nil {
		t.Fatal(err)
	}
	// Debt limits wide enough for the 24 charged (the default allows an
	// hour's worth, 10, per call).
	wide := floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: 3 * time.Hour, Total: 24 * time.Hour})
	lim, err := grpclimit.New(bucket(t, floodgate.PerHour(10), clk.option(), wide), grpclimit.WithCostAfter(cost))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serveKinds(t, lim)
	var trailer metadata.MD
	if _, err := client.UnaryCall(ctxTimeout(t), &testpb.SimpleRequest{ResponseSize: 25}, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if got := trailer.Get("x-cost"); len(got) != 1 || got[0] != "25" {
		t.Fatalf("the handler's trailer did not reach the client: %v", trailer)
	}
	_, err = client.UnaryCall(ctxTimeout(t), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
	wait, ok := retryDelay(err)
	if status.Code(err) != codes.ResourceExhausted || !ok || wait != 96*time.Minute ||
		trailer.Get("grpc-retry-pushback-ms")[0] != strconv.Itoa(96*60*1000) {
		t.Fatalf("in debt: %v, RetryInfo %v, trailer %v; want ResourceExhausted after 96m", err, wait, trailer)
	}
}

// A stream holds its in-flight slot while it is open: a second stream of
// the same peer is refused while the first runs, and gets in once it has
// ended; a stream's handler reports its cost through its context, charged
// when it ends.
func TestStreamHoldsItsSlotAndReportsItsCost(t *testing.T) {
	slots, err := floodgate.NewInFlight(1)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := grpclimit.New(slots)
	if err != nil {
		t.Fatal(err)
	}
	client, svc := serveKinds(t, lim)
	first, err := client.StreamingOutputCall(ctxTimeout(t), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-svc.entered
	second, err := client.StreamingOutputCall(ctxTimeout(t), &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	if wait, ok := retryDelay(err); status.Code(err) != codes.ResourceExhausted || !ok || wait != time.Second {
		t.Fatalf("a second stream while the first runs: %v, want ResourceExhausted with RetryInfo 1s", err)
	}
	svc.release <- struct{}{}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); slots.Held("127.0.0.1") != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first stream's slot was not released")
		}
	}

	clk := newClock()
	charged := bucket(t, floodgate.PerHour(10), clk.option())
	lim, err = grpclimit.New(charged, grpclimit.WithCostAfter(grpclimit.CostReported))
	if err != nil {
		t.Fatal(err)
	}
	client, svc = serveKinds(t, lim)
	stream, err := client.StreamingOutputCall(ctxTimeout(t), &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{Size: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	<-svc.entered
	svc.release <- struct{}{}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if d, _ := charged.AllowN(context.Background(), "127.0.0.1", 0); d.Remaining == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream's reported cost of 7 was not charged")
		}
	}
}

// A service-wide in-flight cap refuses as a busy service: Unavailable,
// Trailers-Only, with a RetryInfo and a pushback, so that a retry policy
// with UNAVAILABLE retryable waits as asked.
func TestServiceInFlightIsUnavailableWithPushback(t *testing.T) {
	svcCap, err := floodgate.NewServiceInFlight(1)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := svcCap.AllowN(context.Background(), "", 1); !d.Allowed {
		t.Fatal("could not take the slot")
	}
	lim, err := grpclimit.New(svcCap) // no key function needed
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serveKinds(t, lim)
	var header, trailer metadata.MD
	_, err = client.UnaryCall(ctxTimeout(t), &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
	wait, ok := retryDelay(err)
	if status.Code(err) != codes.Unavailable || !ok || wait != time.Second || len(header) != 0 ||
		len(trailer.Get("grpc-retry-pushback-ms")) != 1 || trailer.Get("grpc-retry-pushback-ms")[0] != "1000" {
		t.Fatalf("%v (RetryInfo %v), header %v, trailer %v; want Trailers-Only Unavailable with a pushback of 1000", err, wait, header, trailer)
	}
}
