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
// (WithCountStatus, or a CORS preflight given back if answered as one). A framework whose response may still change after
// the handler has returned calls DeferSettle before returning: the
// middleware then does not settle when the handler returns, and the
// framework calls the function it got, once, with the status actually
// sent. ginlimit does so, because a gin middleware registered before the
// limit can set the status after c.Next() (an error handler answering
// 401 for a handler's c.Error, say).
//
// A status of 0 means the framework could not see the status sent: the
// request counts (a preflight is not given back), the safe side. A
// request whose settlement is deferred and never completed stays
// counted too. A handler that panics is counted either way
// (later calls of the function do nothing); so is a second call.
type DeferredSettler interface {
	DeferSettle() (settle func(status int))
}

// statusWriter records the status of a response for WithCountStatus,
// its body's size for WithCostAfter, and for a CORS preflight whether it
// was answered as one, and settles the request by them. It forwards
// Flush, Hijack and ReadFrom, and Unwrap lets http.ResponseController
// reach the other optional methods (deadlines, full duplex) of the writer
// below.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64 // body bytes written
	settling
	deferred bool // a framework took the settlement over (DeferSettle)
}

// settling is what settles one request: the gate, the outcome, how the
// response decides it (the status predicate, the cost function, and for
// a preflight its answer so far), and whether it is done.
type settling struct {
	gate      *Gate
	ctx       context.Context
	req       *http.Request // as the handler got it
	out       Outcome
	counts    func(status int) bool      // nil: every status counts
	cost      func(Response) (int, bool) // nil: the estimate, or ReportCost's
	preflight bool                       // the request has a preflight's shape: see preflight.go
	answer    preflightAnswer
	settled   atomic.Bool
}

// settle settles the request once; later calls do nothing.
func (s *settling) settle(res Result) {
	if s.settled.CompareAndSwap(false, true) {
		s.gate.Settle(s.ctx, s.out, res)
	}
}

// settleStatus settles the request by the response it was answered with:
// its status — it does not count if the predicate says so, or if it is a
// preflight answered as one — and for WithCostAfter, what the cost
// function reads of it.
func (w *statusWriter) settleStatus(status int) {
	if w.settled.Load() {
		return
	}
	res := Result{Uncounted: status > 0 && w.counts != nil && !w.counts(status)}
	if w.preflight && status > 0 {
		res.Uncounted = res.Uncounted || w.answeredPreflight(status)
	}
	if w.cost != nil {
		reported, ok := w.out.ReportedCost()
		if !ok {
			reported = -1
		}
		res.Cost, res.CostKnown = w.cost(Response{Request: w.req, Status: status, Header: w.Header(), Bytes: w.bytes, Reported: reported})
	}
	w.settle(res)
}

// answeredPreflight reports whether a preflight was answered as one.
func (w *statusWriter) answeredPreflight(status int) bool {
	seen := w.status != 0
	if !seen && !w.deferred {
		// The handler wrote nothing: net/http sends the header as it is
		// now.
		w.answer.committed(w.Header())
		seen = true
	}
	w.answer.body = w.answer.body || w.bytes > 0
	// A status a framework sent around this writer may have had a body
	// this writer did not see either: it stays counted.
	return seen && w.answer.answered(status)
}

// DeferSettle implements DeferredSettler.
func (w *statusWriter) DeferSettle() func(status int) {
	w.deferred = true
	return w.settleStatus
}

// final records the response's final status, as its header goes out.
func (w *statusWriter) final(code int) {
	w.status = code
	if w.preflight {
		w.answer.committed(w.Header())
	}
}

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are interim; the final status follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.final(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.final(http.StatusOK)
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
		w.final(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker by hijacking the wrapped writer's
// connection, if it can be.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.answer.body = true // served, whatever the status
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
	}
	return conn, rw, err
}

// ReadFrom implements io.ReaderFrom, so that io.Copy to the response
// keeps the wrapped writer's fast path (sendfile for a *os.File).
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.final(http.StatusOK)
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
