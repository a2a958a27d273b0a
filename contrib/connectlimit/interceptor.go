package connectlimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
)

// Interceptor limits the calls a connect handler serves: a
// connect.Interceptor for the handler side, unary and streaming. Give it
// to the handlers to limit:
//
//	limit, err := connectlimit.New(limiter, connectlimit.WithKeyFunc(clientIP))
//	path, handler := greetv1connect.NewGreetServiceHandler(svc, connect.WithInterceptors(limit))
//
// Each call is keyed from its own data (Call: the peer, the request
// headers, the procedure), decided by floodgate's admission core
// (floodgate.Gate), and answered in connect's error model, the same on
// the Connect, gRPC and gRPC-Web protocols; see the package
// documentation. A stream is decided once, when it opens. On a client,
// the interceptor does nothing. An Interceptor is safe for concurrent
// use.
type Interceptor struct {
	// all limits every call (New, NewPolicy); nil for a route table.
	all *limit
	// routes maps procedures, services ("/pkg.Service/") and "/" to
	// their limits (NewRoutes).
	routes      map[string]*limit
	skip        []func(Call) bool
	counts      func(connect.Code) bool    // nil: every code counts
	cost        func(Response) (int, bool) // nil: no cost after the call
	limitHealth bool
	// quotaOnAllowed: send the quota on allowed calls too
	// (WithQuotaOnAllowed), not only on denials.
	quotaOnAllowed bool
}

// limit is one selector and the admission core deciding its calls.
type limit struct {
	sel  *floodgate.SelectorFor[Call]
	gate *floodgate.Gate
}

var _ connect.Interceptor = (*Interceptor)(nil)

// New returns an interceptor that limits every call with l, keyed by
// WithKeyFunc (default KeyByIP(): the peer's address; none for a
// limit that ignores keys, floodgate.NewServiceInFlight) under the policy
// name WithPolicyName (default floodgate.DefaultPolicyName). A nil
// limiter, or an invalid option, is an error wrapping
// floodgate.ErrInvalidOption.
func New(l floodgate.Limiter, opts ...Option) (*Interceptor, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil limiter", floodgate.ErrInvalidOption)
	}
	switch sw, ok := l.(interface{ ServiceWide() bool }); {
	case c.key == nil && ok && sw.ServiceWide(): // a service-wide limit: nothing to key
		c.key = func(Call) (string, error) { return "", nil }
	case c.key == nil:
		if c.key, err = KeyByIP(); err != nil {
			return nil, err
		}
	}
	if c.policyName == "" {
		c.policyName = floodgate.DefaultPolicyName
	}
	sel, err := floodgate.NewSelectorFor(Policy{Name: c.policyName, Limiter: l, Key: c.key})
	if err != nil {
		return nil, err
	}
	return newInterceptor(c, sel)
}

// NewPolicy returns an interceptor that limits each call by the policy
// sel selects for it: the first whose key function yields a key (see
// floodgate.SelectorFor). A call no policy applies to is refused with
// connect.CodeInvalidArgument. It takes the options of New but
// WithKeyFunc and WithPolicyName.
func NewPolicy(sel *floodgate.SelectorFor[Call], opts ...Option) (*Interceptor, error) {
	if sel == nil {
		return nil, fmt.Errorf("%w: nil policy selector", floodgate.ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := c.selectorOnly(); err != nil {
		return nil, err
	}
	return newInterceptor(c, sel)
}

func newInterceptor(c *config, sel *floodgate.SelectorFor[Call]) (*Interceptor, error) {
	l, err := newLimit(c, sel)
	if err != nil {
		return nil, err
	}
	i := c.interceptor()
	i.all = l
	return i, nil
}

// interceptor returns an interceptor with the options of c, and no limit.
func (c *config) interceptor() *Interceptor {
	return &Interceptor{skip: c.skip, counts: c.counts, cost: c.cost, limitHealth: c.limitHealth, quotaOnAllowed: c.quotaOnAllowed}
}

func newLimit(c *config, sel *floodgate.SelectorFor[Call]) (*limit, error) {
	gate, err := floodgate.NewGate(sel, c.gate...)
	if err != nil {
		return nil, err
	}
	return &limit{sel: sel, gate: gate}, nil
}

// healthService is the prefix of the standard health service's
// procedures.
const healthService = "/grpc.health.v1.Health/"

// limitOf returns the limit of a call, or nil when the call is exempt:
// a procedure of the health service (unless WithLimitHealth), a call a
// skip predicate exempts, or one no route takes.
func (i *Interceptor) limitOf(c Call) *limit {
	if !i.limitHealth && isHealth(c.Spec.Procedure) {
		return nil
	}
	for _, skip := range i.skip {
		if skip(c) {
			return nil
		}
	}
	if i.routes == nil {
		return i.all
	}
	return i.route(c.Spec.Procedure)
}

// isHealth reports a procedure of grpc.health.v1.Health itself: the
// service name exactly, so that no procedure of another service can pass
// for one.
func isHealth(procedure string) bool {
	rest, ok := strings.CutPrefix(procedure, healthService)
	return ok && strings.IndexByte(rest, '/') < 0
}

// WrapUnary limits a unary call on the handler side.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient {
			return next(ctx, req)
		}
		peer := req.Peer()
		c := Call{Context: ctx, Spec: spec, Peer: peer, Header: req.Header()}
		l := i.limitOf(c)
		if l == nil {
			return next(ctx, req)
		}
		out := l.admit(c)
		if out.Blocked {
			return nil, refuse(ctx, peer.Protocol, &out)
		}
		var resp connect.AnyResponse
		ctx = out.Context(ctx) // the meter of ReportCost, under WithCostAfter
		run := func() (err error) {
			resp, err = next(ctx, req)
			return err
		}
		sent := func() (header, trailer http.Header) {
			if resp != nil {
				return resp.Header(), resp.Trailer()
			}
			return nil, nil
		}
		err := i.run(ctx, l, &out, run, sent)
		switch {
		case !i.quotaOnAllowed:
		case err != nil:
			setErrorQuota(err, &out.Quota)
		default:
			out.Quota.SetHeaders(resp.Header())
		}
		return resp, err
	}
}

// WrapStreamingClient returns next: the interceptor limits handlers.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler limits a stream when it opens; its messages are
// not counted.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		peer := conn.Peer()
		c := Call{Context: ctx, Spec: conn.Spec(), Peer: peer, Header: conn.RequestHeader()}
		l := i.limitOf(c)
		if l == nil {
			return next(ctx, conn)
		}
		out := l.admit(c)
		if out.Blocked {
			return refuse(ctx, peer.Protocol, &out)
		}
		if i.quotaOnAllowed {
			out.Quota.SetHeaders(conn.ResponseHeader())
		}
		ctx = out.Context(ctx)
		sent := func() (http.Header, http.Header) { return conn.ResponseHeader(), conn.ResponseTrailer() }
		return i.run(ctx, l, &out, func() error { return next(ctx, conn) }, sent)
	}
}

// admit keys the call and hands it to the admission core.
func (l *limit) admit(c Call) floodgate.Outcome {
	fc := l.sel.Call(c)
	fc.Method, fc.Path = "POST", c.Spec.Procedure
	return l.gate.Admit(c.Context, fc)
}

// run runs the handler of an admitted call and, if the admission core
// settles it (out.NeedsSettle), settles it by the code it ended with and
// what it sent (WithCountCodes, WithCostAfter), or as counted if the
// handler panics: the panic goes on up. A call that only holds in-flight
// slots releases them either way.
func (i *Interceptor) run(ctx context.Context, l *limit, out *floodgate.Outcome, handler func() error, sent func() (header, trailer http.Header)) error {
	if !out.NeedsSettle {
		return handler()
	}
	returned := false
	defer func() {
		if !returned {
			l.gate.Settle(ctx, *out, floodgate.Result{Panicked: true})
		}
	}()
	err := handler()
	returned = true
	l.gate.Settle(ctx, *out, i.result(out, err, sent))
	return err
}

// result is what the call's end says for Settle: whether it counts, and
// under WithCostAfter what it cost.
func (i *Interceptor) result(out *floodgate.Outcome, err error, sent func() (http.Header, http.Header)) floodgate.Result {
	res := floodgate.Result{Uncounted: i.counts != nil && !i.counts(codeOf(err))}
	if i.cost == nil {
		return res
	}
	reported, ok := out.ReportedCost()
	if !ok {
		reported = -1
	}
	resp := Response{Procedure: out.Call.Path, Err: err, Reported: reported}
	resp.Header, resp.Trailer = sent()
	var ce *connect.Error
	if errors.As(err, &ce) {
		resp.Trailer = ce.Meta()
	}
	res.Cost, res.CostKnown = i.cost(resp)
	return res
}

// codeOf is the code a call ended with: 0 for success, which connect
// does not name (connect.CodeOf(nil) is CodeUnknown).
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}
