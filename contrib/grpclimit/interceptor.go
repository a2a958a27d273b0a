package grpclimit

import (
	"context"
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Interceptors limits the calls of a gRPC server. Install both, and put
// them first in the chain, so that streams are limited as well as unary
// calls and no interceptor before them sends response headers (which
// would turn a denial from Trailers-Only into a response the client does
// not retry) or, under WithQuotaOnAllowed, sets them after an allowed
// unary call (the limit has sent them with its quota as the call
// returned):
//
//	lim, err := grpclimit.New(limiter, grpclimit.WithKeyFunc(clientIP))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary()),
//		grpc.ChainStreamInterceptor(lim.Stream()),
//	)
//
// Each call is keyed from its own data (Call: the peer, the metadata, the
// full method), decided by floodgate's admission core (floodgate.Gate),
// and answered in gRPC's terms; see the package documentation. A stream
// is decided once, when it opens. Interceptors is safe for concurrent use.
type Interceptors struct {
	// all limits every call (New, NewPolicy); nil for a route table.
	all *limit
	// routes maps full methods, services ("/pkg.Service/") and "/" to
	// their limits (NewRoutes).
	routes      map[string]*limit
	skip        []func(ctx context.Context, fullMethod string) bool
	limitHealth bool
	counts      func(codes.Code) bool      // nil: every code counts
	cost        func(Response) (int, bool) // nil: no cost after the call
	// quotaOnAllowed: send the quota on allowed calls too
	// (WithQuotaOnAllowed), not only on denials.
	quotaOnAllowed bool
}

// limit is one selector and the admission core deciding its calls.
type limit struct {
	sel  *floodgate.SelectorFor[Call]
	gate *floodgate.Gate
}

// New returns interceptors that limit every call with l, keyed by
// WithKeyFunc (default KeyByIP(): the peer's address; none for a
// limit that ignores keys, floodgate.NewServiceInFlight) under the policy
// name WithPolicyName (default floodgate.DefaultPolicyName). A nil
// limiter, or an invalid option, is an error wrapping
// floodgate.ErrInvalidOption.
func New(l floodgate.Limiter, opts ...Option) (*Interceptors, error) {
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
	return newInterceptors(c, sel)
}

// NewPolicy returns interceptors that limit each call by the policy sel
// selects for it: the first whose key function yields a key (see
// floodgate.SelectorFor). A call no policy applies to is refused with
// codes.InvalidArgument. It takes the options of New but WithKeyFunc and
// WithPolicyName.
//
//	sel, err := floodgate.NewSelectorFor(
//		grpclimit.Policy{Name: "api-key", Limiter: perKey, Key: apiKey},
//		grpclimit.Policy{Name: "ip", Limiter: perIP, Key: clientIP},
//	)
//	lim, err := grpclimit.NewPolicy(sel)
func NewPolicy(sel *floodgate.SelectorFor[Call], opts ...Option) (*Interceptors, error) {
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
	return newInterceptors(c, sel)
}

func newInterceptors(c *config, sel *floodgate.SelectorFor[Call]) (*Interceptors, error) {
	l, err := newLimit(c, sel)
	if err != nil {
		return nil, err
	}
	i := c.interceptors()
	i.all = l
	return i, nil
}

// interceptors returns interceptors with the options of c, and no limit.
func (c *config) interceptors() *Interceptors {
	return &Interceptors{skip: c.skip, limitHealth: c.limitHealth, counts: c.counts, cost: c.cost, quotaOnAllowed: c.quotaOnAllowed}
}

func newLimit(c *config, sel *floodgate.SelectorFor[Call]) (*limit, error) {
	gate, err := floodgate.NewGate(sel, c.gate...)
	if err != nil {
		return nil, err
	}
	return &limit{sel: sel, gate: gate}, nil
}

// healthService is the prefix of the standard health service's methods.
const healthService = "/grpc.health.v1.Health/"

// limitOf returns the limit of a call, or nil when the call is exempt.
func (i *Interceptors) limitOf(ctx context.Context, method string) *limit {
	if !i.limitHealth && isHealth(method) {
		return nil
	}
	for _, skip := range i.skip {
		if skip(ctx, method) {
			return nil
		}
	}
	if i.routes == nil {
		return i.all
	}
	return i.route(method)
}

// isHealth reports a method of grpc.health.v1.Health itself: the service
// name exactly, so that no method of another service can pass for one.
func isHealth(method string) bool {
	rest, ok := strings.CutPrefix(method, healthService)
	return ok && strings.IndexByte(rest, '/') < 0
}

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		l := i.limitOf(ctx, info.FullMethod)
		if l == nil {
			return handler(ctx, req)
		}
		out := l.admit(ctx, info.FullMethod)
		stream := grpc.ServerTransportStreamFromContext(ctx) // nil outside a server
		if out.Blocked {
			return nil, refuse(ctx, unaryTrailer(stream), &out)
		}
		var resp any
		var err error
		if out.NeedsSettle {
			resp, err = i.settledUnary(ctx, l, &out, unaryRun{req, handler, stream})
		} else {
			resp, err = handler(ctx, req)
		}
		answerQuota(stream, i.allowedQuota(&out.Quota), err != nil)
		return resp, err
	}
}

// allowedQuota returns the quota metadata of an allowed call: none by
// default, which formats nothing; under WithQuotaOnAllowed a new map of
// the call's values (a map a call: a map shared between calls would
// serve only a quota whose values repeat, which a client's spending
// quota does not).
func (i *Interceptors) allowedQuota(q *floodgate.Quota) metadata.MD {
	if !i.quotaOnAllowed {
		return nil
	}
	return quotaMD(q, 0)
}

// unaryRun is the request of a unary call, the handler it goes to and
// the call's transport stream (nil outside a server).
type unaryRun struct {
	req     any
	handler grpc.UnaryHandler
	stream  grpc.ServerTransportStream
}

// settledUnary runs the handler of an admitted unary call the admission
// core settles after it (see settled), with the meter of ReportCost in
// its context and, under WithCostAfter, the metadata it sends recorded.
func (i *Interceptors) settledUnary(ctx context.Context, l *limit, out *floodgate.Outcome, run unaryRun) (any, error) {
	ctx = out.Context(ctx)
	var sent *sentMD
	if i.cost != nil && run.stream != nil {
		sent = &sentMD{}
		ctx = grpc.NewContextWithServerTransportStream(ctx, &recordingTransport{ServerTransportStream: run.stream, sent: sent})
	}
	var resp any
	err := i.settled(ctx, l, out, sent, func() (err error) {
		resp, err = run.handler(ctx, run.req)
		return err
	})
	return resp, err
}

// Stream returns the stream server interceptor. A stream is decided once,
// when it opens, at the configured cost; the messages on an open stream
// are not limited.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		l := i.limitOf(ctx, info.FullMethod)
		if l == nil {
			return handler(srv, ss)
		}
		out := l.admit(ctx, info.FullMethod)
		if out.Blocked {
			return refuse(ctx, ss.SetTrailer, &out)
		}
		if md := i.allowedQuota(&out.Quota); md != nil {
			// SetHeader fails only once the header has been sent, and
			// the handler, the only one who could send it, has not run.
			_ = ss.SetHeader(md)
		}
		if !out.NeedsSettle {
			return handler(srv, ss)
		}
		var sent *sentMD
		if i.cost != nil {
			sent = &sentMD{}
			ss = &recordingStream{ServerStream: ss, ctx: out.Context(ctx), sent: sent}
		}
		return i.settled(ctx, l, &out, sent, func() error { return handler(srv, ss) })
	}
}

// unaryTrailer sets the trailers of a unary call, if it runs in a server.
func unaryTrailer(stream grpc.ServerTransportStream) trailerSetter {
	return func(md metadata.MD) {
		if stream != nil {
			_ = stream.SetTrailer(md) // fails only once the call is over
		}
	}
}

// admit keys the call and hands it to the admission core.
func (l *limit) admit(ctx context.Context, method string) floodgate.Outcome {
	c := l.sel.Call(Call{Context: ctx, FullMethod: method})
	c.Method, c.Path = "POST", method
	return l.gate.Admit(ctx, c)
}

// settled runs the handler of a call the admission core settles after
// it (out.NeedsSettle), and settles it by the code it ended with and the
// metadata it sent (WithCountCodes, WithCostAfter), or as counted if the
// handler panics: the panic goes on up, and whatever the handler did
// before it counts. A call that only holds in-flight slots releases them
// either way.
func (i *Interceptors) settled(ctx context.Context, l *limit, out *floodgate.Outcome, sent *sentMD, run func() error) error {
	returned := false
	defer func() {
		if !returned {
			l.gate.Settle(ctx, *out, floodgate.Result{Panicked: true})
		}
	}()
	err := run()
	returned = true
	l.gate.Settle(ctx, *out, i.result(out, sent, err))
	return err
}

// result is what the call's end says for Settle: whether it counts, and
// under WithCostAfter what it cost.
func (i *Interceptors) result(out *floodgate.Outcome, sent *sentMD, err error) floodgate.Result {
	res := floodgate.Result{Uncounted: i.counts != nil && !i.counts(status.Code(err))}
	if i.cost == nil {
		return res
	}
	reported, ok := out.ReportedCost()
	if !ok {
		reported = -1
	}
	resp := Response{FullMethod: out.Call.Path, Err: err, Reported: reported}
	if sent != nil {
		resp.Header, resp.Trailer = sent.get()
	}
	res.Cost, res.CostKnown = i.cost(resp)
	return res
}
