package grpclimit_test

import (
	"context"
	"net"
	"strconv"
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
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
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

func bucket(t testing.TB, r floodgate.Rate, opts ...floodgate.Option) *floodgate.TokenBucket {
	t.Helper()
	l, err := floodgate.NewTokenBucket(r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testService is grpc.testing.TestService, counting the calls that reach
// its handlers. UnaryCall ends with the code its request's
// ResponseStatus names, and panics if the status message is "panic".
type testService struct {
	testpb.UnimplementedTestServiceServer
	empties, unaries, streams atomic.Int32
	ran                       func() // if set, called by UnaryCall first
}

func (s *testService) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.empties.Add(1)
	return &testpb.Empty{}, nil
}

func (s *testService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.unaries.Add(1)
	if s.ran != nil {
		s.ran()
	}
	if v := metadata.ValueFromIncomingContext(ctx, "x-cost"); len(v) > 0 {
		if n, err := strconv.Atoi(v[0]); err == nil {
			_ = floodgate.ReportCost(ctx, n) // the test checks what was charged
		}
	}
	if st := in.GetResponseStatus(); st != nil {
		if st.GetMessage() == "panic" {
			panic("handler panics")
		}
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *testService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss testpb.TestService_StreamingOutputCallServer) error {
	s.streams.Add(1)
	return ss.Send(&testpb.StreamingOutputCallResponse{})
}

// recoverUnary turns a handler's panic into codes.Internal outside the
// limit, as a recovery interceptor does in production, so that a test can
// watch the limit see the panic go by.
func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

// server is a real gRPC server on a loopback TCP port with the
// interceptors, the test service and the health service.
type server struct {
	addr string
	svc  *testService
	srv  *grpc.Server
}

func serveOn(t *testing.T, lim *grpclimit.Interceptors) *server {
	t.Helper()
	return serveCounting(t, lim, nil)
}

// serveCounting is serveOn with ran called by every UnaryCall.
func serveCounting(t *testing.T, lim *grpclimit.Interceptors, ran func()) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary, lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
	s := &server{addr: ln.Addr().String(), svc: &testService{ran: ran}, srv: srv}
	testpb.RegisterTestServiceServer(srv, s.svc)
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// dial returns a client connection to s with the dial options given.
func (s *server) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() }) // the test is over; a close error changes nothing
	return conn
}

// serve starts a server and returns a test service client connected to it.
func serve(t *testing.T, lim *grpclimit.Interceptors) (testpb.TestServiceClient, *testService) {
	t.Helper()
	s := serveOn(t, lim)
	return testpb.NewTestServiceClient(s.dial(t)), s.svc
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// retryDelay returns the RetryInfo delay of a status error.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
