package connectlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"testing"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/connectlimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func call(addr string, header ...string) connectlimit.Call {
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	return connectlimit.Call{Context: context.Background(), Spec: connect.Spec{Procedure: "/pkg.Svc/M"}, Peer: connect.Peer{Addr: addr, Protocol: connect.ProtocolGRPC}, Header: h}
}

// TestKeys: the peer by KeyByIP's rules (a forged X-Forwarded-For gains
// nothing from an untrusted peer), a header, the procedure, and a join.
func TestKeys(t *testing.T) {
	byPeer := must(connectlimit.KeyByIP())
	viaProxy := must(connectlimit.KeyByIP(floodgate.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), floodgate.FromXForwardedFor()))
	apiKey := must(connectlimit.KeyByHeader("x-api-key"))
	join := must(connectlimit.JoinKeys(apiKey, connectlimit.KeyByProcedure()))
	for i, tt := range []struct {
		key  connectlimit.KeyFunc
		call connectlimit.Call
		want string // "" for an error
	}{
		{byPeer, call("203.0.113.7:5000"), "203.0.113.7"},
		{byPeer, call("203.0.113.7:5000", "X-Forwarded-For", "198.51.100.1"), "203.0.113.7"},
		{viaProxy, call("203.0.113.7:5000", "X-Forwarded-For", "198.51.100.1"), "203.0.113.7"},
		{viaProxy, call("10.1.1.1:5000", "X-Forwarded-For", "1.2.3.4, 198.51.100.1"), "198.51.100.1"},
		{byPeer, call("[2001:db8:1:2::9]:5000"), "2001:db8:1:2::/64"},
		{byPeer, call("garbage"), ""},
		{apiKey, call("", "X-Api-Key", " k1 "), "k1"},
		{apiKey, call("", "X-Api-Key", "k1", "X-Api-Key", "k1 "), "k1"},
		{apiKey, call("", "X-Api-Key", "k1", "X-Api-Key", "k2"), ""},
		{apiKey, call("", "X-Api-Key", "", "X-Api-Key", "k2"), ""},
		{apiKey, call(""), ""},
		{connectlimit.KeyByProcedure(), call(""), "/pkg.Svc/M"},
		{join, call("", "X-Api-Key", "k1"), "2:k110:/pkg.Svc/M"},
	} {
		k, err := tt.key(tt.call)
		if tt.want == "" && err == nil || tt.want != "" && (k != tt.want || err != nil) {
			t.Errorf("case %d: %q, %v; want %q", i, k, err, tt.want)
		}
	}
}

// TestFailurePolicyAndHangUp: a failing limiter is CodeUnavailable (fail
// closed) or lets the call through (fail open); a call with no key is
// CodeInvalidArgument under fail-open too; a client gone during the
// decision never runs the handler.
func TestFailurePolicyAndHangUp(t *testing.T) {
	noKey := must(connectlimit.KeyByHeader("x-api-key"))
	for _, tt := range []struct {
		name   string
		cancel bool
		opts   []connectlimit.Option
		code   connect.Code // 0: the handler runs
	}{
		{"fail closed", false, nil, connect.CodeUnavailable},
		{"fail open", false, []connectlimit.Option{connectlimit.WithFailOpen()}, 0},
		{"dry run", false, []connectlimit.Option{connectlimit.WithDryRun()}, 0},
		{"no key, fail open", false, []connectlimit.Option{connectlimit.WithKeyFunc(noKey), connectlimit.WithFailOpen()}, connect.CodeInvalidArgument},
		{"hang-up, fail open", true, []connectlimit.Option{connectlimit.WithFailOpen()}, connect.CodeCanceled},
		{"hang-up, dry run", true, []connectlimit.Option{connectlimit.WithDryRun()}, connect.CodeCanceled},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		opts := tt.opts
		if tt.name != "no key, fail open" { // its options carry its key function
			opts = append(opts, connectlimit.WithKeyFunc(connectlimit.KeyByProcedure()))
		}
		lim := must(connectlimit.New(failingLimiter{cancel: cancel, hangUp: tt.cancel}, opts...))
		ran := false
		unary := lim.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			ran = true
			return connect.NewResponse(wrapperspb.String("")), nil
		})
		_, err := unary(ctx, &fakeRequest{Request: connect.NewRequest(wrapperspb.String(""))})
		cancel()
		if tt.code == 0 && (err != nil || !ran) || tt.code != 0 && (connect.CodeOf(err) != tt.code || ran) {
			t.Errorf("%s: %v, handler ran %v; want code %v", tt.name, err, ran, tt.code)
		}
	}
}

// fakeRequest is a handler-side request for a procedure.
type fakeRequest struct {
	*connect.Request[wrapperspb.StringValue]
}

func (*fakeRequest) Spec() connect.Spec { return connect.Spec{Procedure: "/pkg.Svc/M"} }
func (*fakeRequest) Peer() connect.Peer {
	return connect.Peer{Addr: "192.0.2.1:5000", Protocol: connect.ProtocolConnect}
}

// failingLimiter fails every decision; with hangUp it cancels the
// caller first, as a client hanging up during the decision does.
type failingLimiter struct {
	cancel context.CancelFunc
	hangUp bool
}

func (l failingLimiter) AllowN(ctx context.Context, _ string, _ int) (floodgate.Decision, error) {
	if l.hangUp {
		l.cancel()
		return floodgate.Decision{}, ctx.Err()
	}
	return floodgate.Decision{}, errors.New("store down")
}

// TestOptionErrors: every impossible configuration is refused at
// construction.
func TestOptionErrors(t *testing.T) {
	lim := bucket(t, floodgate.PerMinute(1))
	sel := must(floodgate.NewSelectorFor(connectlimit.Policy{Name: "p", Limiter: lim, Key: connectlimit.KeyByProcedure()}))
	route := func(p string) connectlimit.Route {
		return connectlimit.Route{Procedure: p, Policies: []connectlimit.Policy{{Name: "p", Limiter: lim, Key: connectlimit.KeyByProcedure()}}}
	}
	cases := map[string]func() error{
		"nil option":  func() error { _, err := connectlimit.New(lim, nil); return err },
		"nil limiter": func() error { _, err := connectlimit.New(nil); return err },
		"twice": func() error {
			_, err := connectlimit.New(lim, connectlimit.WithDryRun(), connectlimit.WithDryRun())
			return err
		},
		"dry run and open": func() error {
			_, err := connectlimit.New(lim, connectlimit.WithDryRun(), connectlimit.WithFailOpen())
			return err
		},
		"key on selector": func() error {
			_, err := connectlimit.NewPolicy(sel, connectlimit.WithKeyFunc(connectlimit.KeyByProcedure()))
			return err
		},
		"nil selector":    func() error { _, err := connectlimit.NewPolicy(nil); return err },
		"nil key":         func() error { _, err := connectlimit.New(lim, connectlimit.WithKeyFunc(nil)); return err },
		"nil codes":       func() error { _, err := connectlimit.New(lim, connectlimit.WithCountCodes(nil)); return err },
		"cost > capacity": func() error { _, err := connectlimit.New(lim, connectlimit.WithCost(2)); return err },
		"bad header name": func() error { _, err := connectlimit.KeyByHeader("x api"); return err },
		"JoinKeys nil":    func() error { _, err := connectlimit.JoinKeys(nil); return err },
		"untrusted xff":   func() error { _, err := connectlimit.KeyByIP(floodgate.FromXForwardedFor()); return err },
		"bad policy name": func() error { _, err := connectlimit.New(lim, connectlimit.WithPolicyName("")); return err },
		"nil skip":        func() error { _, err := connectlimit.New(lim, connectlimit.WithSkip(nil)); return err },
		"quota on allowed, no headers": func() error {
			_, err := connectlimit.New(lim, connectlimit.WithHeaders(floodgate.HeadersNone), connectlimit.WithQuotaOnAllowed())
			return err
		},
		"quota on allowed twice": func() error {
			_, err := connectlimit.New(lim, connectlimit.WithQuotaOnAllowed(), connectlimit.WithQuotaOnAllowed())
			return err
		},
		"no routes": func() error { _, err := connectlimit.NewRoutes(nil); return err },
		"route twice": func() error {
			_, err := connectlimit.NewRoutes([]connectlimit.Route{route("/"), route("/")})
			return err
		},
		"route no policy": func() error {
			_, err := connectlimit.NewRoutes([]connectlimit.Route{{Procedure: "/a.B/C"}})
			return err
		},
		"key func on routes": func() error {
			_, err := connectlimit.NewRoutes([]connectlimit.Route{route("/")}, connectlimit.WithKeyFunc(connectlimit.KeyByProcedure()))
			return err
		},
		"route bad policy": func() error {
			_, err := connectlimit.NewRoutes([]connectlimit.Route{{Procedure: "/", Policies: []connectlimit.Policy{{Name: "p", Limiter: lim}}}})
			return err
		},
	}
	for _, p := range []string{"", "a.B/C", "/a.B", "//C", "/a.B/C/D", "/a.B/C/"} {
		cases["route procedure "+p] = func() error { _, err := connectlimit.NewRoutes([]connectlimit.Route{route(p)}); return err }
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}
