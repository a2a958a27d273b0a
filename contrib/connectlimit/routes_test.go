package connectlimit_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Procedures of the routes tests beside echoProcedure and
// streamProcedure: another service's, the health service's, and two
// that only look like it.
const (
	pingProcedure       = "/other.v1.OtherService/Ping"
	healthProcedure     = "/grpc.health.v1.Health/Check"
	healthXProcedure    = "/grpc.health.v1.HealthX/Check"
	healthDeepProcedure = "/x.grpc.health.v1.Health/Check"
)

// serveAll serves every procedure of the routes tests, each an echo (the
// stream sends its request back once), behind lim, over HTTP/2.
func serveAll(t *testing.T, lim *connectlimit.Interceptor) *httptest.Server {
	t.Helper()
	svc := &service{}
	mux := http.NewServeMux()
	for _, p := range []string{echoProcedure, pingProcedure, healthProcedure, healthXProcedure, healthDeepProcedure} {
		mux.Handle(p, connect.NewUnaryHandler(p, svc.echo, connect.WithInterceptors(lim)))
	}
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure, svc.stream, connect.WithInterceptors(lim)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// unaryCall calls procedure on srv with a connect-go client, and returns
// the code (0 for success) and the RateLimit-Policy values sent, from the
// response's headers or the error's metadata.
func unaryCall(t *testing.T, srv *httptest.Server, procedure string) (connect.Code, []string) {
	t.Helper()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+procedure)
	resp, err := client.CallUnary(ctxTimeout(t), connect.NewRequest(wrapperspb.String("hi")))
	if err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%s: %v", procedure, err)
		}
		return ce.Code(), ce.Meta().Values("RateLimit-Policy")
	}
	return 0, resp.Header().Values("RateLimit-Policy")
}

// streamCall opens the stream procedure on srv, reads it to its end, and
// returns the code and the RateLimit-Policy values sent.
func streamCall(t *testing.T, srv *httptest.Server) (connect.Code, []string) {
	t.Helper()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+streamProcedure)
	ss, err := client.CallServerStream(ctxTimeout(t), connect.NewRequest(wrapperspb.String("s")))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ss.Close() }()
	for ss.Receive() {
	}
	if err := ss.Err(); err != nil {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			t.Fatalf("stream: %v", err)
		}
		return ce.Code(), ce.Meta().Values("RateLimit-Policy")
	}
	return 0, ss.ResponseHeader().Values("RateLimit-Policy")
}

// TestRoutes: NewRoutes limits a procedure, a service and the rest by
// their own policies, each route with its own quota, and sends each
// route's quota (here on allowed calls too: the option reaches every
// route); the health service is exempt.
func TestRoutes(t *testing.T) {
	byIP := must(connectlimit.KeyByIP())
	limit := func(n int) floodgate.Limiter {
		return bucket(t, floodgate.Rate{Limit: n, Period: time.Hour}, newClock().option())
	}
	lim := must(connectlimit.NewRoutes([]connectlimit.Route{
		{Procedure: echoProcedure, Policies: []connectlimit.Policy{{Name: "echo", Limiter: limit(1), Key: byIP}}},
		{Procedure: "/test.v1.TestService/", Policies: []connectlimit.Policy{{Name: "service", Limiter: limit(1), Key: byIP}}},
		{Procedure: "/", Policies: []connectlimit.Policy{{Name: "default", Limiter: limit(2), Key: byIP}}},
	}, connectlimit.WithQuotaOnAllowed()))
	srv := serveAll(t, lim)
	type answer struct {
		code   connect.Code
		policy string
	}
	check := func(what string, code connect.Code, policies []string, want answer) {
		t.Helper()
		if code != want.code || len(policies) != 1 || len(policies[0]) < len(want.policy) || policies[0][:len(want.policy)] != want.policy {
			t.Errorf("%s: code %v, RateLimit-Policy %q; want code %v under %s", what, code, policies, want.code, want.policy)
		}
	}
	for i, want := range []answer{{0, `"echo"`}, {connect.CodeResourceExhausted, `"echo"`}} {
		code, pol := unaryCall(t, srv, echoProcedure)
		check(fmt.Sprint("Echo ", i), code, pol, want)
	}
	for i, want := range []answer{{0, `"service"`}, {connect.CodeResourceExhausted, `"service"`}} {
		code, pol := streamCall(t, srv)
		check(fmt.Sprint("Stream ", i), code, pol, want)
	}
	for i, want := range []answer{{0, `"default"`}, {0, `"default"`}, {connect.CodeResourceExhausted, `"default"`}} {
		code, pol := unaryCall(t, srv, pingProcedure)
		check(fmt.Sprint("Ping ", i), code, pol, want)
	}
	for range 3 {
		if code, pol := unaryCall(t, srv, healthProcedure); code != 0 || len(pol) != 0 {
			t.Errorf("health check: code %v, RateLimit-Policy %q; want exempt", code, pol)
		}
	}
}

// TestSkipAndHealth: WithSkip exempts what it says (the calls it exempts
// carry no quota and spend none), several predicates exempt what any of
// them does, and the health service is exempt by its exact name only,
// before any predicate sees it.
func TestSkipAndHealth(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	record := func(c connectlimit.Call) bool {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, c.Spec.Procedure)
		return false
	}
	lim := must(connectlimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()),
		connectlimit.WithKeyFunc(connectlimit.KeyByProcedure()),
		connectlimit.WithSkip(record),
		connectlimit.WithSkip(func(c connectlimit.Call) bool { return c.Spec.Procedure == echoProcedure }),
		connectlimit.WithQuotaOnAllowed()))
	srv := serveAll(t, lim)
	for _, p := range []string{echoProcedure, healthProcedure} {
		for range 3 {
			if code, pol := unaryCall(t, srv, p); code != 0 || len(pol) != 0 {
				t.Errorf("%s: code %v, RateLimit-Policy %q; want exempt", p, code, pol)
			}
		}
	}
	for _, p := range []string{pingProcedure, healthXProcedure, healthDeepProcedure} {
		first, _ := unaryCall(t, srv, p)
		second, _ := unaryCall(t, srv, p)
		if first != 0 || second != connect.CodeResourceExhausted {
			t.Errorf("%s: %v then %v, want OK then ResourceExhausted (limited)", p, first, second)
		}
	}
	if code, _ := streamCall(t, srv); code != 0 {
		t.Errorf("stream: %v, want OK (its own key)", code)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{echoProcedure, echoProcedure, echoProcedure, pingProcedure, pingProcedure,
		healthXProcedure, healthXProcedure, healthDeepProcedure, healthDeepProcedure, streamProcedure}
	if !slices.Equal(seen, want) {
		t.Errorf("skip saw %v, want %v: every call but the health service's, in order", seen, want)
	}

	limited := must(connectlimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()),
		connectlimit.WithKeyFunc(connectlimit.KeyByProcedure()), connectlimit.WithLimitHealth()))
	srv = serveAll(t, limited)
	if first, second := func() (connect.Code, connect.Code) {
		a, _ := unaryCall(t, srv, healthProcedure)
		b, _ := unaryCall(t, srv, healthProcedure)
		return a, b
	}(); first != 0 || second != connect.CodeResourceExhausted {
		t.Errorf("WithLimitHealth: health check %v then %v, want OK then ResourceExhausted", first, second)
	}
}

// A skip predicate runs before the call is keyed: a call it exempts
// never reaches the key function, and so is never refused for a key it
// lacks.
func TestSkipBeforeKey(t *testing.T) {
	var keyed atomic.Int32 // the key function runs on the server's goroutines
	key := func(connectlimit.Call) (string, error) { keyed.Add(1); return "", floodgate.ErrNoKey }
	lim := must(connectlimit.New(bucket(t, floodgate.PerHour(1)), connectlimit.WithKeyFunc(key),
		connectlimit.WithSkip(func(c connectlimit.Call) bool { return c.Spec.Procedure == pingProcedure })))
	srv := serveAll(t, lim)
	if code, _ := unaryCall(t, srv, pingProcedure); code != 0 || keyed.Load() != 0 {
		t.Errorf("skipped call: code %v, key function ran %d times; want OK, 0", code, keyed.Load())
	}
	if code, _ := unaryCall(t, srv, echoProcedure); code != connect.CodeInvalidArgument || keyed.Load() != 1 {
		t.Errorf("limited call without a key: code %v, key function ran %d times; want InvalidArgument, 1", code, keyed.Load())
	}
}
