package ginlimit

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
	"github.com/gin-gonic/gin"
)

// New returns a gin handler that limits requests with l, configured as
// floodgate.NewMiddleware is; the error is NewMiddleware's.
func New(l floodgate.Limiter, opts ...floodgate.MiddlewareOption) (gin.HandlerFunc, error) {
	mw, err := floodgate.NewMiddleware(l, opts...)
	if err != nil {
		return nil, err
	}
	return handler(mw), nil
}

// NewPolicy returns a gin handler that limits each request by the policy
// sel selects for it, configured as floodgate.NewPolicyMiddleware is.
func NewPolicy(sel *floodgate.PolicySelector, opts ...floodgate.MiddlewareOption) (gin.HandlerFunc, error) {
	mw, err := floodgate.NewPolicyMiddleware(sel, opts...)
	if err != nil {
		return nil, err
	}
	return handler(mw), nil
}

// NewRoutes returns a gin handler that limits each request by the route of
// rt it matches, configured as floodgate.NewRouteMiddleware is. Routes
// are matched by http.ServeMux's rules, not gin's: prefer one New handler
// per gin route unless the patterns are plain paths.
func NewRoutes(rt *floodgate.Routes, opts ...floodgate.MiddlewareOption) (gin.HandlerFunc, error) {
	mw, err := floodgate.NewRouteMiddleware(rt, opts...)
	if err != nil {
		return nil, err
	}
	return handler(mw), nil
}

// chain carries a gin request through the floodgate middleware.
type chain struct {
	c    *gin.Context
	l    *limit
	next bool // the middleware let the request through
}

type chainKey struct{}

// limit is one gin handler's state: whether it has warned that it
// settles without Serve.
type limit struct {
	warned atomic.Bool
}

// handler adapts a floodgate middleware: the handler it protects runs the
// rest of the gin chain.
func handler(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	limited := mw(http.HandlerFunc(runChain))
	l := &limit{}
	return func(c *gin.Context) {
		ch := &chain{c: c, l: l}
		limited.ServeHTTP(c.Writer, c.Request.WithContext(context.WithValue(c.Request.Context(), chainKey{}, ch)))
		if !ch.next {
			// Denied or refused: floodgate has answered.
			c.Abort()
		}
	}
}

// runChain runs the gin handlers after the limit, writing through w, the
// writer the middleware handed on.
func runChain(w http.ResponseWriter, r *http.Request) {
	ch := r.Context().Value(chainKey{}).(*chain)
	ch.next = true
	c := ch.c
	// The request as the middleware passes it on: a key function may have
	// replaced its body with one that replays what it read.
	c.Request = r
	orig := c.Writer
	if w == http.ResponseWriter(orig) {
		// The middleware does not watch the response: nothing to wrap.
		c.Next()
		return
	}
	// The middleware watches the response, as WithCostAfter has it do: a
	// metered call's meter goes into gin's keys too, where
	// floodgate.ReportCost(c, n) finds it (gin.Context.Value reads the
	// request's context only under ContextWithFallback).
	if m := r.Context().Value(floodgate.MeterKey); m != nil {
		c.Set(floodgate.MeterKey, m)
	}
	gw := &writer{ResponseWriter: orig, mw: w}
	c.Writer = gw
	if ds, ok := w.(floodgate.DeferredSettler); ok {
		// The request is settled by its status (WithCountStatus, a CORS
		// preflight), and a middleware registered before the limit may
		// still set it after this chain returns: gw stays c.Writer.
		settle := ds.DeferSettle()
		if s, ok := r.Context().Value(sentKey{}).(*sent); ok {
			// Serve records the response beneath gin: the status
			// actually sent settles the request once the engine is done.
			s.settles = append(s.settles, settle)
			c.Next()
			return
		}
		// Best effort: the status actually sent, as far as this writer,
		// gin's and the request's end can tell it.
		// A middleware before the limit that put a writer of its own in
		// c.Writer may put gin's back and answer through it after this
		// chain returns, unseen: then a response not sent by then counts
		// whatever its status. On gin's own writer, an answer after the
		// chain goes through gw, or is the status gin holds.
		swapped := !ginsOwn(orig)
		gw.settling = &settling{settle: settle, unseenCounts: swapped}
		c.Next()
		if !gw.returned(r.Context()) && swapped {
			ch.l.warnUnseen(r)
		}
		return
	}
	defer func() { c.Writer = orig }()
	c.Next()
	// A status set but never written (c.Status(401) and return) is sent
	// by gin after the whole chain: tell the middleware now, which records
	// it without writing (gin's writer holds the header until then).
	gw.commit()
}

// settling settles a request by the status gin sends, once the limit's
// chain has returned: at once if the response is committed by then,
// else when it is (a middleware before the limit writes it), or, for a
// response no writer here sees (a status gin sends without a body after
// the whole chain, or one a middleware before the limit writes through
// a writer it swapped in and restored), when the request's context ends
// — the server cancels it when the handler is done — as a status not
// known, which counts. Until then the request counts.
type settling struct {
	mu        sync.Mutex
	settle    func(status int) // the middleware's, from DeferSettle
	status    int              // the status set so far; committed if sent
	committed bool             // the status is sent: it is final
	// unseenCounts: a status not sent through this limit's writer is
	// not known (a middleware before the limit swapped gin's writer), and
	// counts.
	unseenCounts bool
	back         bool // the limit's chain has returned
	done         bool
}

// set records a status set before anything is sent, as gin does.
func (s *settling) set(code int) {
	s.mu.Lock()
	if !s.committed && code > 0 {
		s.status = code
	}
	s.mu.Unlock()
}

// sent records that the response went out with its status.
func (s *settling) sent(status int) {
	s.mu.Lock()
	if !s.committed {
		s.committed, s.status = true, status
	}
	s.mu.Unlock()
	s.settleIf(false)
}

// settleIf settles once the chain is back and the status is final, or,
// with ended, is as final as it will get.
func (s *settling) settleIf(ended bool) {
	s.mu.Lock()
	ready := s.back && !s.done && (s.committed || ended)
	s.done = s.done || ready
	status := s.status
	if !s.committed && s.unseenCounts {
		// Nothing this limit sees sent the response: a middleware before
		// it may have answered through the writer it swapped out, with
		// any status. Unknown counts.
		status = 0
	}
	s.mu.Unlock()
	if ready {
		s.settle(status)
	}
}

// returned records that the limit's chain is back, and reports whether
// the response was sent by then; the status so far is gin's.
func (w *writer) returned(ctx context.Context) bool {
	s := w.settling
	s.mu.Lock()
	s.back = true
	if !s.committed {
		s.status = w.ResponseWriter.Status()
	}
	committed := s.committed
	s.mu.Unlock()
	if committed {
		s.settleIf(false)
		return true
	}
	context.AfterFunc(ctx, func() { s.settleIf(true) })
	return false
}

// warnUnseen says once, at WARN, that a middleware before the limit
// swapped gin's writer and a response this limit settles by its status
// was not sent when the limit's chain returned: without Serve such a
// request counts whatever its status.
func (l *limit) warnUnseen(r *http.Request) {
	if l.warned.CompareAndSwap(false, true) {
		slog.Default().LogAttrs(r.Context(), slog.LevelWarn,
			"ginlimit: a middleware registered before the limit replaced gin's writer, and a response the limit settles by its status (WithCountStatus, a CORS preflight's refund) was not sent when the limit's chain returned; what that middleware sends through the writer it swapped out is not seen, so such a request counts whatever its status (a preflight is not given back). Serve the engine with ginlimit.Serve(engine) to settle by the status actually sent",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path))
	}
}

// writer is the gin.ResponseWriter the handlers see while the middleware
// watches the response: gin's own writer for everything gin keeps
// (status, size, headers), the middleware's writer for what goes out.
type writer struct {
	gin.ResponseWriter
	mw        http.ResponseWriter // the middleware's writer, around gin's
	committed bool
	settling  *settling // nil unless the request is settled by status
}

// commit passes the status gin will send to the middleware's writer, once,
// before anything is written: gin lets handlers change the status until
// the first write, so the middleware must not see an earlier one.
func (w *writer) commit() {
	if !w.committed {
		w.committed = true
		status := w.ResponseWriter.Status()
		w.mw.WriteHeader(status)
		if w.settling != nil {
			w.settling.sent(status)
		}
	}
}

// WriteHeader records the status as gin does, sent with the first write.
func (w *writer) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	if w.settling != nil {
		w.settling.set(w.ResponseWriter.Status())
	}
}

// WriteHeaderNow sends the status.
func (w *writer) WriteHeaderNow() {
	w.commit()
	w.ResponseWriter.WriteHeaderNow()
}

func (w *writer) Write(b []byte) (int, error) {
	w.commit()
	return w.mw.Write(b)
}

// WriteString writes s.
func (w *writer) WriteString(s string) (int, error) {
	w.commit()
	return io.WriteString(w.mw, s)
}

// Flush sends the status and what was written so far.
func (w *writer) Flush() {
	w.commit()
	_ = http.NewResponseController(w.mw).Flush() // gin's Flush has no error either
}

// Hijack takes over the connection through the middleware's writer, which
// counts it as status 101.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.committed = true
	conn, rw, err := http.NewResponseController(w.mw).Hijack()
	if err == nil && w.settling != nil {
		w.settling.sent(http.StatusSwitchingProtocols)
	}
	return conn, rw, err
}

// Unwrap returns the middleware's writer, for http.ResponseController.
func (w *writer) Unwrap() http.ResponseWriter { return w.mw }

var _ gin.ResponseWriter = (*writer)(nil)

// ginsOwn reports whether w is the writer gin puts in every context,
// not one a middleware swapped in.
func ginsOwn(w gin.ResponseWriter) bool {
	return reflect.TypeOf(w) == ginWriterType()
}

// ginWriterType is the type of gin's own writer, unexported by gin: read
// off a context gin makes.
var ginWriterType = sync.OnceValue(func() reflect.Type {
	c, _ := gin.CreateTestContext(nil) // nothing is written through it
	return reflect.TypeOf(c.Writer)
})
