package floodgate

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
)

// A CORS preflight is an OPTIONS request that a browser sends on its own,
// before a cross-origin request that is not "simple", to ask whether the
// real request may be sent: it carries Origin and
// Access-Control-Request-Method, no credentials and no body, and its
// answer (from a CORS handler) has no body either. The middleware lets
// it through without a decision (WithLimitPreflights says otherwise):
// counting it would charge the user twice per real request, refusing it
// would make the page see a network error instead of the 429 of the real
// request.

// exemptPreflight reports whether r is a CORS preflight the middleware
// lets through uncounted.
func (m *middleware) exemptPreflight(r *http.Request) bool {
	if m.cfg.preflights || m.preflightServed.Load() {
		return false
	}
	h := r.Header
	return len(h["Origin"]) > 0 && len(h["Access-Control-Request-Method"]) > 0 && h["Access-Control-Request-Method"][0] != ""
}

// servePreflight passes an exempt preflight to the handler, and ends the
// exemption if the handler serves it as a request: its answer has a
// body, which a CORS handler's preflight answer never has. Without that,
// a client could reach a handler that answers OPTIONS as it answers GET
// (no method check, no CORS handler in between) as often as it likes by
// dressing its requests as preflights.
func (m *middleware) servePreflight(w http.ResponseWriter, r *http.Request, next http.Handler) {
	pw := &preflightWriter{ResponseWriter: w}
	next.ServeHTTP(pw, r)
	if pw.body && m.preflightServed.CompareAndSwap(false, true) {
		l := m.cfg.logger
		if l == nil {
			l = slog.Default()
		}
		l.LogAttrs(r.Context(), slog.LevelError,
			"floodgate: a CORS preflight reached a handler that answered it with a body, as a request; preflights are limited from now on. Put the CORS handler outside the limit (it answers preflights itself), or route the limited handler by method",
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path))
	}
}

// preflightWriter notes whether a preflight's answer has a body. It
// forwards Flush, Hijack and ReadFrom, and Unwrap lets
// http.ResponseController reach the writer below.
type preflightWriter struct {
	http.ResponseWriter
	body bool // a body was written, or the connection hijacked
}

func (w *preflightWriter) Write(b []byte) (int, error) {
	w.body = w.body || len(b) > 0
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (w *preflightWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *preflightWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack implements http.Hijacker: a hijacked connection is served, not
// answered as a preflight.
func (w *preflightWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.body = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// ReadFrom implements io.ReaderFrom.
func (w *preflightWriter) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(w.ResponseWriter, src)
	w.body = w.body || n > 0
	return n, err
}
