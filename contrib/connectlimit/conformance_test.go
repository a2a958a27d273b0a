package connectlimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// connectDriver serves the conformance cases behind connectlimit on a
// real HTTP/2 server, called by a connect-go client on one protocol, with
// connect.WithRecover outside the limit (a panic becomes CodeInternal
// after the limit has seen it go by).
type connectDriver struct {
	protocol string
	opts     []connect.ClientOption
}

func (d connectDriver) Name() string { return "connect/" + d.protocol }

func (d connectDriver) Start(t *testing.T, s conformance.Setup) conformance.Client {
	byClient := must(connectlimit.KeyByHeader(conformance.HeaderClient))
	key := func(c connectlimit.Call) (string, error) { return conformance.KeyFailure(byClient(c)) }
	opts := []connectlimit.Option{connectlimit.WithKeyFunc(key), connectlimit.WithDecisionHook(s.Hook)}
	if s.FailOpen {
		opts = append(opts, connectlimit.WithFailOpen())
	}
	if s.CountFailures {
		opts = append(opts, connectlimit.WithCountCodes(func(c connect.Code) bool { return c == connect.CodeUnauthenticated }))
	}
	if s.CostAfter {
		opts = append(opts, connectlimit.WithCostAfter(connectlimit.CostReported))
	}
	if s.Wait != nil {
		opts = append(opts, connectlimit.WithWait(*s.Wait), connectlimit.WithWaitTimer(s.Timer))
	}
	if s.Stats != nil {
		opts = append(opts, connectlimit.WithGateStats(s.Stats))
	}
	lim, err := connectlimit.New(s.Limiter, opts...)
	if err != nil {
		t.Fatal(err)
	}
	act := func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		s.Ran()
		if n, err := strconv.Atoi(req.Header().Get(conformance.HeaderCost)); err == nil {
			_ = floodgate.ReportCost(ctx, n) // the case checks what was charged
		}
		switch conformance.Action(req.Msg.GetValue()) {
		case conformance.Fail:
			return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("wrong password"))
		case conformance.Panic:
			panic("handler panics")
		}
		return connect.NewResponse(req.Msg), nil
	}
	recovered := connect.WithRecover(func(context.Context, connect.Spec, http.Header, any) error {
		return connect.NewError(connect.CodeInternal, errors.New("panic"))
	})
	mux := http.NewServeMux()
	mux.Handle(echoProcedure, connect.NewUnaryHandler(echoProcedure, act, recovered, connect.WithInterceptors(lim)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return connectClient{echoClient(srv, d.opts)}
}

type connectClient struct {
	c *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]
}

func (c connectClient) Do(ctx context.Context, st conformance.Step) conformance.Answer {
	req := connect.NewRequest(wrapperspb.String(string(st.Action)))
	if st.Client != "" {
		req.Header().Set(conformance.HeaderClient, st.Client)
	}
	if st.Cost > 0 {
		req.Header().Set(conformance.HeaderCost, strconv.Itoa(st.Cost))
	}
	_, err := c.c.CallUnary(ctx, req)
	a := conformance.Answer{Detail: fmt.Sprint(err)}
	if err == nil {
		a.Kind = conformance.OK
		return a
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		a.Kind = conformance.Failed
	case connect.CodeInternal:
		a.Kind = conformance.Panicked
	case connect.CodeResourceExhausted:
		a.Kind = conformance.Denied
		a.RetryAfter, _ = retryDelay(err)
	case connect.CodeInvalidArgument:
		a.Kind = conformance.ClientError
	case connect.CodeUnavailable:
		a.Kind = conformance.Unavailable
		if wait, ok := retryDelay(err); ok { // a busy service, not a failed limiter
			a.Kind, a.RetryAfter = conformance.Overloaded, wait
		}
	case connect.CodeCanceled:
		a.Kind = conformance.HungUp
	}
	return a
}

// TestConformance runs the outcome cases every transport passes alike
// (internal/conformance) through connectlimit, on each protocol.
func TestConformance(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) { conformance.Run(t, connectDriver{p.name, p.opts}) })
	}
}
