package grpclimitv01

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Option configures the interceptors (New, NewPolicy, NewRoutes). Each
// may be given once; a repeated or invalid option is an error wrapping
// floodgate.ErrInvalidOption.
type Option func(*config) error

type config struct {
	mw       []floodgate.MiddlewareOption
	failOpen bool
	dryRun   bool
	given    map[string]bool
}

func (c *config) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("%w: %s given twice", floodgate.ErrInvalidOption, name)
	}
	c.given[name] = true
	return nil
}

// forward passes a floodgate middleware option through.
func forward(name string, o floodgate.MiddlewareOption) Option {
	return func(c *config) error {
		c.mw = append(c.mw, o)
		return c.once(name)
	}
}

// WithKeyFunc sets how a call's key is formed (default floodgate.KeyByIP():
// the peer's address only). The key function sees the call as described in
// the package documentation. It does not apply to NewPolicy and NewRoutes,
// whose policies carry their key functions.
func WithKeyFunc(f floodgate.KeyFunc) Option { return forward("WithKeyFunc", floodgate.WithKeyFunc(f)) }

// WithPolicyName sets the policy name in the quota metadata (default
// floodgate.DefaultPolicyName). It does not apply to NewPolicy and
// NewRoutes.
func WithPolicyName(name string) Option {
	return forward("WithPolicyName", floodgate.WithPolicyName(name))
}

// WithCost sets the units every call costs (default 1).
func WithCost(n int) Option { return forward("WithCost", floodgate.WithCost(n)) }

// WithHeaders selects the quota metadata (default floodgate.HeadersIETF:
// ratelimit and ratelimit-policy; HeadersLegacy sends x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset; HeadersNone sends none but
// retry-after on a denial).
func WithHeaders(style floodgate.HeaderStyle) Option {
	return forward("WithHeaders", floodgate.WithHeaders(style))
}

// WithLogger logs denials and failures to decide as floodgate.WithLogger
// does (paced: a flood does not flood the log); the path logged is the full
// method.
func WithLogger(l *slog.Logger) Option { return forward("WithLogger", floodgate.WithLogger(l)) }

// WithDecisionHook calls hook for every decision, as
// floodgate.WithDecisionHook does; DecisionEvent.Request is the call seen
// as an HTTP request.
func WithDecisionHook(hook func(floodgate.DecisionEvent)) Option {
	return forward("WithDecisionHook", floodgate.WithDecisionHook(hook))
}

// WithSkip exempts the calls for which skip returns true, such as health
// checks: they reach the handler without a decision or metadata. Several
// WithSkip options exempt a call if any of them does.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) error {
		if skip == nil {
			return fmt.Errorf("%w: nil skip predicate", floodgate.ErrInvalidOption)
		}
		c.mw = append(c.mw, floodgate.WithSkip(func(r *http.Request) bool {
			return skip(r.Context(), r.URL.Path)
		}))
		return nil
	}
}

// WithFailOpen lets a call through when no decision can be made because
// the limiter or its store failed. The default is to fail closed with
// codes.Unavailable: the limiter is a security control, and failing open
// hands an attacker who can make it fail an unlimited method. Errors the
// caller caused (floodgate.ErrNoKey, ErrNoClientIP, ErrKeyTooLong,
// ErrInvalidBody, ErrAmbiguousKey) are codes.InvalidArgument even so, and
// a call whose context is done never runs.
func WithFailOpen() Option {
	return func(c *config) error {
		c.failOpen = true
		return c.once("WithFailOpen")
	}
}

// WithDryRun decides, sends the quota metadata, logs and calls the hook,
// but never refuses a call (see floodgate.WithDryRun). It conflicts with
// WithFailOpen, which it implies.
func WithDryRun() Option {
	return func(c *config) error {
		c.dryRun = true
		c.mw = append(c.mw, floodgate.WithDryRun())
		return c.once("WithDryRun")
	}
}

// WithCountCodes counts only the calls whose status code makes counts
// return true, e.g. only failed sign-ins:
//
//	grpclimit.WithCountCodes(func(c codes.Code) bool { return c == codes.Unauthenticated })
//
// It is floodgate.WithCountStatus for gRPC, with the same guarantees: the
// quota is checked before the handler runs and the call is denied if it
// could not count.
func WithCountCodes(counts func(codes.Code) bool) Option {
	return func(c *config) error {
		if counts == nil {
			return fmt.Errorf("%w: nil code predicate", floodgate.ErrInvalidOption)
		}
		c.mw = append(c.mw, floodgate.WithCountStatus(func(s int) bool {
			code, ok := codeOfStatus(s)
			return ok && counts(code)
		}))
		return c.once("WithCountCodes")
	}
}

// KeyByFullMethod returns a key function that keys a call by its full
// method, "/package.Service/Method". Join it with a client key
// (floodgate.JoinKeys) for a limit per client per method.
func KeyByFullMethod() floodgate.KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.URL == nil || r.URL.Path == "" {
			return "", fmt.Errorf("%w: no gRPC method", floodgate.ErrNoKey)
		}
		return r.URL.Path, nil
	}
}

// Interceptors limits the calls of a gRPC server. Install both, so that
// streams are limited as well as unary calls:
//
//	lim, err := grpclimit.New(limiter, grpclimit.WithKeyFunc(clientIP))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.Unary()),
//		grpc.ChainStreamInterceptor(lim.Stream()),
//	)
//
// A stream is decided once, when it opens, at the configured cost.
// Interceptors is safe for concurrent use.
type Interceptors struct {
	failOpen bool
	limited  http.Handler // the floodgate middleware around runCall
}

// New returns interceptors that limit every call with l, keyed by
// WithKeyFunc (default: the peer's address).
func New(l floodgate.Limiter, opts ...Option) (*Interceptors, error) {
	return build(opts, func(mw []floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error) {
		return floodgate.NewMiddleware(l, mw...)
	})
}

// NewPolicy returns interceptors that limit each call by the policy sel
// selects for it (see floodgate.PolicySelector).
func NewPolicy(sel *floodgate.PolicySelector, opts ...Option) (*Interceptors, error) {
	return build(opts, func(mw []floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error) {
		return floodgate.NewPolicyMiddleware(sel, mw...)
	})
}

// NewRoutes returns interceptors that limit each call by the route of rt
// its method matches (see floodgate.Routes); a call is a POST to its full
// method, so the pattern "POST /pkg.Service/Method" names one method and
// "/pkg.Service/" a whole service. Calls no route matches are not limited.
func NewRoutes(rt *floodgate.Routes, opts ...Option) (*Interceptors, error) {
	return build(opts, func(mw []floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error) {
		return floodgate.NewRouteMiddleware(rt, mw...)
	})
}

func build(opts []Option, newMW func([]floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error)) (*Interceptors, error) {
	c := config{given: map[string]bool{}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", floodgate.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.dryRun && c.failOpen {
		return nil, fmt.Errorf("%w: WithFailOpen has no effect in dry-run, which never refuses", floodgate.ErrInvalidOption)
	}
	mw := append(c.mw, floodgate.WithDeniedHandler(denied))
	i := &Interceptors{failOpen: c.failOpen}
	if !c.dryRun {
		// Dry-run lets every failure through; otherwise the error policy
		// is this package's, since it answers in gRPC codes.
		mw = append(mw, floodgate.WithErrorHandler(i.failed))
	}
	limit, err := newMW(mw)
	if err != nil {
		return nil, err
	}
	i.limited = limit(http.HandlerFunc(runCall))
	return i, nil
}

// Unary returns the unary server interceptor.
func (i *Interceptors) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := &call{
			ctx:       ctx,
			run:       func() (any, error) { return handler(ctx, req) },
			setHeader: func(md metadata.MD) error { return grpc.SetHeader(ctx, md) },
		}
		return i.decide(c, info.FullMethod)
	}
}

// Stream returns the stream server interceptor.
func (i *Interceptors) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		c := &call{
			ctx:       ss.Context(),
			run:       func() (any, error) { return nil, handler(srv, ss) },
			setHeader: ss.SetHeader,
		}
		_, err := i.decide(c, info.FullMethod)
		return err
	}
}

// call carries one gRPC call through the floodgate middleware, which sees
// it as an *http.Request with the call in its context.
type call struct {
	ctx       context.Context
	run       func() (any, error)
	setHeader func(metadata.MD) error

	ran      bool // run was called: resp and err are the handler's
	resp     any
	err      error // the handler's error, or the refusal
	decision floodgate.Decision
	denied   bool
}

type callKey struct{}

func callOf(r *http.Request) *call { return r.Context().Value(callKey{}).(*call) }

func (i *Interceptors) decide(c *call, fullMethod string) (any, error) {
	if err := c.ctx.Err(); err != nil {
		// The client has gone: deciding would only charge it for nothing.
		return nil, status.FromContextError(err).Err()
	}
	w := &headerWriter{header: make(http.Header, 4)}
	i.limited.ServeHTTP(w, asRequest(c, fullMethod))
	switch {
	case c.ran || c.err != nil:
		return c.resp, c.err
	case c.denied:
		sendQuota(c, w.header)
		return nil, deniedStatus(c.decision)
	case c.ctx.Err() != nil:
		return nil, status.FromContextError(c.ctx.Err()).Err()
	case w.status >= 400 && w.status < 500:
		// floodgate answered a request it blames on the client (400, 413,
		// 431) itself.
		return nil, status.Error(codes.InvalidArgument, "rate limiter: the call carries no usable key")
	default:
		return nil, status.Error(codes.Unavailable, "rate limiter unavailable; try again later")
	}
}

// asRequest shows the call to floodgate as the HTTP/2 request it is.
func asRequest(c *call, fullMethod string) *http.Request {
	md, _ := metadata.FromIncomingContext(c.ctx)
	h := make(http.Header, len(md))
	host := ""
	for k, vs := range md {
		if strings.HasPrefix(k, ":") {
			if k == ":authority" && len(vs) == 1 {
				host = vs[0]
			}
			continue
		}
		h[textproto.CanonicalMIMEHeaderKey(k)] = vs
	}
	remote := ""
	if p, ok := peer.FromContext(c.ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	r := &http.Request{
		Method:     http.MethodPost,
		URL:        &url.URL{Path: fullMethod},
		RequestURI: fullMethod,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     h,
		Body:       http.NoBody,
		Host:       host,
		RemoteAddr: remote,
	}
	return r.WithContext(context.WithValue(c.ctx, callKey{}, c))
}

// runCall is the handler the middleware protects: it sends the quota
// metadata and runs the gRPC handler, then reports its code as the
// response status for WithCountCodes.
func runCall(w http.ResponseWriter, r *http.Request) {
	c := callOf(r)
	if err := c.ctx.Err(); err != nil {
		// Whatever let the call through (fail-open, dry-run), a client that
		// has gone away does not get the handler run.
		c.err = status.FromContextError(err).Err()
		return
	}
	sendQuota(c, w.Header())
	c.ran = true
	c.resp, c.err = c.run()
	w.WriteHeader(statusOfCode(status.Code(c.err)))
}

// denied is the floodgate.DeniedHandler: it records the decision, which
// becomes a ResourceExhausted status with the exact wait.
func denied(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
	c := callOf(r)
	c.denied, c.decision = true, d
	w.WriteHeader(http.StatusTooManyRequests)
}

// failed is the floodgate.ErrorHandler: no decision could be made.
func (i *Interceptors) failed(w http.ResponseWriter, r *http.Request, err error) {
	c := callOf(r)
	switch {
	case c.ctx.Err() != nil:
		c.err = status.FromContextError(c.ctx.Err()).Err()
	case clientCaused(err):
		c.err = status.Error(codes.InvalidArgument, "rate limiter: the call carries no usable key")
	case i.failOpen:
		runCall(w, r)
	default:
		c.err = status.Error(codes.Unavailable, "rate limiter unavailable; try again later")
	}
}

// clientCaused reports the key errors that are the caller's doing: fixing
// them is up to the caller, and letting them through under fail-open would
// let any caller switch the limit off.
func clientCaused(err error) bool {
	for _, target := range []error{floodgate.ErrNoKey, floodgate.ErrNoClientIP, floodgate.ErrKeyTooLong, floodgate.ErrInvalidBody, floodgate.ErrAmbiguousKey} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// deniedStatus is the status of a denied call: ResourceExhausted with a
// RetryInfo giving the exact wait, or without one when the call costs more
// than the limit can ever hold (waiting does not help).
func deniedStatus(d floodgate.Decision) error {
	if d.RetryAfter <= 0 {
		return status.Error(codes.ResourceExhausted, "rate limit exceeded: the call costs more than the limit allows and cannot succeed")
	}
	st := status.New(codes.ResourceExhausted, "rate limit exceeded; retry after "+d.RetryAfter.Round(time.Millisecond).String())
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// quotaHeaders are the headers floodgate sets that travel as metadata:
// the canonical header key, and the metadata key (lower case, as gRPC
// requires).
var quotaHeaders = [...]struct{ header, md string }{
	{"Ratelimit-Policy", "ratelimit-policy"},
	{"Ratelimit", "ratelimit"},
	{"X-Ratelimit-Limit", "x-ratelimit-limit"},
	{"X-Ratelimit-Remaining", "x-ratelimit-remaining"},
	{"X-Ratelimit-Reset", "x-ratelimit-reset"},
	{"Retry-After", "retry-after"},
}

// sendQuota copies floodgate's quota headers into the response header
// metadata.
func sendQuota(c *call, h http.Header) {
	var md metadata.MD
	for _, k := range quotaHeaders {
		if vs := h[k.header]; len(vs) > 0 {
			if md == nil {
				md = make(metadata.MD, 3)
			}
			md[k.md] = vs
		}
	}
	if md != nil {
		// SetHeader fails only once the header has been sent, and the
		// handler, the only one who could send it, has not run yet.
		_ = c.setHeader(md)
	}
}

// headerWriter is the ResponseWriter floodgate writes to: only the headers
// and the status matter, there is no body.
type headerWriter struct {
	header http.Header
	status int
}

func (w *headerWriter) Header() http.Header { return w.header }

func (w *headerWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *headerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}

// Status codes of calls as the middleware sees them: 600 + the gRPC code,
// so that WithCountCodes can tell every code apart (mapping to HTTP
// statuses would merge several) while staying a valid three-digit status.
const codeStatusBase = 600

func statusOfCode(c codes.Code) int { return codeStatusBase + int(c) }

func codeOfStatus(s int) (codes.Code, bool) {
	if s < codeStatusBase || s > codeStatusBase+int(codes.Unauthenticated) {
		return 0, false
	}
	return codes.Code(s - codeStatusBase), true
}
