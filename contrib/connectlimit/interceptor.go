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
	sel         *floodgate.SelectorFor[Call]
	gate        *floodgate.Gate
	counts      func(connect.Code) bool    // nil: every code counts
	cost        func(Response) (int, bool) // nil: no cost after the call
	limitHealth bool
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
	if c.given["WithKeyFunc"] || c.given["WithPolicyName"] {
		return nil, fmt.Errorf("%w: WithKeyFunc and WithPolicyName do not apply to a policy selector; set them on each Policy", floodgate.ErrInvalidOption)
	}
	return newInterceptor(c, sel)
}

func newInterceptor(c *config, sel *floodgate.SelectorFor[Call]) (*Interceptor, error) {
	gate, err := floodgate.NewGate(sel, c.gate...)
	if err != nil {
		return nil, err
	}
	return &Interceptor{sel: sel, gate: gate, counts: c.counts, cost: c.cost, limitHealth: c.limitHealth}, nil
}

// exempt reports a procedure of grpc.health.v1.Health itself, unless
// WithLimitHealth.
func (i *Interceptor) exempt(procedure string) bool {
	rest, ok := strings.CutPrefix(procedure, "/grpc.health.v1.Health/")
	return ok && !i.limitHealth && strings.IndexByte(rest, '/') < 0
}

// WrapUnary limits a unary call on the handler side.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		if spec.IsClient || i.exempt(spec.Procedure) {
			return next(ctx, req)
		}
		peer := req.Peer()
		out := i.admit(Call{Context: ctx, Spec: spec, Peer: peer, Header: req.Header()})
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
		err := i.run(ctx, &out, run, sent)
		if err != nil {
			setErrorQuota(err, &out.Quota)
		} else {
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
		spec := conn.Spec()
		if i.exempt(spec.Procedure) {
			return next(ctx, conn)
		}
		peer := conn.Peer()
		out := i.admit(Call{Context: ctx, Spec: spec, Peer: peer, Header: conn.RequestHeader()})
		if out.Blocked {
			return refuse(ctx, peer.Protocol, &out)
		}
		out.Quota.SetHeaders(conn.ResponseHeader())
		ctx = out.Context(ctx)
		sent := func() (http.Header, http.Header) { return conn.ResponseHeader(), conn.ResponseTrailer() }
		return i.run(ctx, &out, func() error { return next(ctx, conn) }, sent)
	}
}

// admit keys the call and hands it to the admission core.
func (i *Interceptor) admit(c Call) floodgate.Outcome {
	fc := i.sel.Call(c)
	fc.Method, fc.Path = "POST", c.Spec.Procedure
	return i.gate.Admit(c.Context, fc)
}

// run runs the handler of an admitted call and, if the admission core
// settles it (out.NeedsSettle), settles it by the code it ended with and
// what it sent (WithCountCodes, WithCostAfter), or as counted if the
// handler panics: the panic goes on up. A call that only holds in-flight
// slots releases them either way.
func (i *Interceptor) run(ctx context.Context, out *floodgate.Outcome, handler func() error, sent func() (header, trailer http.Header)) error {
	if !out.NeedsSettle {
		return handler()
	}
	returned := false
	defer func() {
		if !returned {
			i.gate.Settle(ctx, *out, floodgate.Result{Panicked: true})
		}
	}()
	err := handler()
	returned = true
	i.gate.Settle(ctx, *out, i.result(out, err, sent))
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
