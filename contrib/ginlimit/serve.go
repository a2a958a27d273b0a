package ginlimit

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

// Serve returns engine — a gin engine, or any handler that serves one —
// with the response it sends recorded beneath gin, for the limits inside
// it that settle by status (floodgate.WithCountStatus, and the refund of
// a CORS preflight): each request is settled by the status actually
// written to the connection, once engine.ServeHTTP has returned —
// whichever gin middleware wrote it, through whichever writer. Without
// it a limit settles by the status as far as its own writer, gin's and
// the request's end can tell, which misses a status that a middleware
// registered before the limit writes through a writer it swaps in and
// restores around c.Next() (an access log capturing the body, say), and
// the limit then logs one WARN with slog.Default.
//
//	r := gin.New()
//	r.POST("/login", limit, login)
//	http.ListenAndServe(addr, ginlimit.Serve(r))
//
// Serve must be the outermost handler, or at least outside every
// middleware that may change the status: a net/http middleware around it
// that rewrites the response is not seen. A handler that panics is
// counted, whatever gin.Recovery then writes; so is a request whose
// engine panics past Serve. It costs three small allocations per request.
func Serve(engine http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &sent{ResponseWriter: w}
		engine.ServeHTTP(s, r.WithContext(context.WithValue(r.Context(), sentKey{}, s)))
		// Not reached if the engine panics: the requests then stay
		// counted, the safe side.
		s.settle()
	})
}

type sentKey struct{}

// sent records the status of a response as it goes out, and settles
// the limits' requests by it. It forwards Flush, Hijack and CloseNotify,
// which gin's writer asserts, and Unwrap lets http.ResponseController
// reach the rest. It lives in one request's goroutine: gin runs the
// chain, and Serve settles, there.
type sent struct {
	http.ResponseWriter
	status  int
	settles []func(status int) // the limits' deferred settlements
}

// settle settles every limit's request by the status sent: the one
// written, or the 200 net/http sends for a handler that wrote nothing.
func (s *sent) settle() {
	status := s.status
	if status == 0 {
		status = http.StatusOK
	}
	for _, settle := range s.settles {
		settle(status)
	}
}

func (s *sent) WriteHeader(code int) {
	// 1xx responses other than 101 are interim; the final status follows.
	if s.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sent) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher: gin's writer calls it unchecked.
func (s *sent) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker; a hijacked connection counts as 101.
func (s *sent) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

// CloseNotify implements http.CloseNotifier, which gin's writer asserts
// unchecked (gin's Context.Stream uses it).
func (s *sent) CloseNotify() <-chan bool {
	if cn, ok := s.ResponseWriter.(http.CloseNotifier); ok {
		return cn.CloseNotify()
	}
	return nil // never fires: the writer below cannot tell
}

// Unwrap returns the wrapped ResponseWriter, for http.ResponseController.
func (s *sent) Unwrap() http.ResponseWriter { return s.ResponseWriter }
