package connectlimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// serveKinds serves an echo whose response trailer X-Cost is the request's
// value, and a stream held until released, behind lim.
func serveKinds(t *testing.T, lim *connectlimit.Interceptor) (*httptest.Server, chan struct{}, chan struct{}) {
	t.Helper()
	entered, release := make(chan struct{}, 8), make(chan struct{})
	echo := func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		resp := connect.NewResponse(req.Msg)
		resp.Trailer().Set("X-Cost", req.Msg.GetValue())
		return resp, nil
	}
	stream := func(_ context.Context, req *connect.Request[wrapperspb.StringValue], ss *connect.ServerStream[wrapperspb.StringValue]) error {
		entered <- struct{}{}
		<-release
		return ss.Send(req.Msg)
	}
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure, echo, connect.WithInterceptors(lim)))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure, stream, connect.WithInterceptors(lim)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, entered, release
}

// On each protocol: the cost a handler sets in its response trailer is
// charged after the call (25 on 10 an hour: 15 in debt, the next call
// waits 96 min); a stream holds its in-flight slot while it runs.
func TestKindsOnThreeProtocols(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			bucket, err := floodgate.NewTokenBucket(floodgate.PerHour(10), floodgate.WithClock(func() time.Time { return time.Unix(1e9, 0) }),
				floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: 3 * time.Hour, Total: 24 * time.Hour})) // the 24 charged fit
			if err != nil {
				t.Fatal(err)
			}
			cost := must(connectlimit.CostTrailer("X-Cost"))
			lim := must(connectlimit.New(bucket, connectlimit.WithKeyFunc(must(connectlimit.KeyByHeader("X-Client"))), connectlimit.WithCostAfter(cost)))
			srv, _, _ := serveKinds(t, lim)
			call := func(v string) error {
				req := connect.NewRequest(wrapperspb.String(v))
				req.Header().Set("X-Client", "ann")
				_, err := echoClient(srv, p.opts).CallUnary(ctxTimeout(t), req)
				return err
			}
			if err := call("25"); err != nil {
				t.Fatal(err)
			}
			err = call("0")
			if wait, ok := retryDelay(err); connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || wait != 96*time.Minute {
				t.Fatalf("in debt: %v (RetryInfo %v), want ResourceExhausted after 96m", err, wait)
			}

			slots := must(floodgate.NewInFlight(1))
			lim = must(connectlimit.New(slots, connectlimit.WithKeyFunc(must(connectlimit.KeyByHeader("X-Client")))))
			srv, entered, release := serveKinds(t, lim)
			open := func() (*connect.ServerStreamForClient[wrapperspb.StringValue], error) {
				req := connect.NewRequest(wrapperspb.String("x"))
				req.Header().Set("X-Client", "ann")
				c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+streamProcedure, p.opts...)
				return c.CallServerStream(ctxTimeout(t), req)
			}
			firstDone := make(chan error, 1)
			go func() { // the call returns with the first message, once released
				first, err := open()
				if err == nil {
					for first.Receive() {
					}
					err = first.Err()
				}
				firstDone <- err
			}()
			<-entered
			second, err := open()
			if err == nil {
				second.Receive()
				err = second.Err()
			}
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("a second stream while the first runs: %v, want ResourceExhausted", err)
			}
			release <- struct{}{}
			if err := <-firstDone; err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); slots.Held("ann") != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the first stream's slot was not released: " + strconv.Itoa(slots.Held("ann")))
				}
			}
		})
	}
}
