package floodgate

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// DeferredSettler is implemented by the ResponseWriter the middleware
// hands to the handler of a request it settles by status
// (WithCountStatus). A framework whose response may still change after
// the handler has returned calls DeferSettle before returning: the
// middleware then does not settle when the handler returns, and the
// framework calls the function it got, once, with the status actually
// sent. ginlimit does so, because a gin middleware registered before the
// limit can set the status after c.Next() (an error handler answering
// 401 for a handler's c.Error, say).
//
// A request whose settlement is deferred and never completed stays
// counted: the safe side. A handler that panics is counted either way
// (later calls of the function do nothing); so is a second call.
type DeferredSettler interface {
	DeferSettle() (settle func(status int))
}

// statusWriter records the status of a response for WithCountStatus,
// and its body's size for WithCostAfter, and settles the request by them.
// It forwards Flush, Hijack and ReadFrom, and Unwrap lets
// http.ResponseController reach the other optional methods (deadlines,
// full duplex) of the writer below.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64 // body bytes written
	settling
	deferred bool // a framework took the settlement over (DeferSettle)
}

// settling is what settles one request: the gate, the outcome, how the
// response decides it (the status predicate, the cost function), and
// whether it is done.
type settling struct {
	gate    *Gate
	ctx     context.Context
	req     *http.Request // as the handler got it
	out     Outcome
	counts  func(status int) bool      // nil: every status counts
	cost    func(Response) (int, bool) // nil: the estimate, or ReportCost's
	settled atomic.Bool
}

// settle settles the request once; later calls do nothing.
func (s *settling) settle(res Result) {
	if s.settled.CompareAndSwap(false, true) {
		s.gate.Settle(s.ctx, s.out, res)
	}
}

// settleStatus settles the request by the response it was answered with:
// its status, and for WithCostAfter, what the cost function reads of it.
func (w *statusWriter) settleStatus(status int) {
	if w.settled.Load() {
		return
	}
	res := Result{Uncounted: w.counts != nil && !w.counts(status)}
	if w.cost != nil {
		reported, ok := w.out.ReportedCost()
		if !ok {
			reported = -1
		}
		res.Cost, res.CostKnown = w.cost(Response{Request: w.req, Status: status, Header: w.Header(), Bytes: w.bytes, Reported: reported})
	}
	w.settle(res)
}

// DeferSettle implements DeferredSettler.
func (w *statusWriter) DeferSettle() func(status int) {
	w.deferred = true
	return w.settleStatus
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are interim; the final status follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher; it does nothing if the wrapped writer
// cannot flush.
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, reporting an error if the wrapped writer cannot;
// http.ResponseController prefers it to Flush.
func (w *statusWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker by hijacking the wrapped writer's
// connection, if it can be.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// ReadFrom implements io.ReaderFrom, so that io.Copy to the response
// keeps the wrapped writer's fast path (sendfile for a *os.File).
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(w.ResponseWriter, src)
	}
	w.bytes += n
	return n, err
}

func (w *statusWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return w.status
}
