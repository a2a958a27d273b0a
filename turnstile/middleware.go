package turnstile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
)

// FormField is the form field the Turnstile widget fills in with its token.
const FormField = "cf-turnstile-response"

// DefaultMaxBodyBytes bounds how much of a request body the middleware
// buffers to find the token in a form, unless WithMaxBodyBytes says
// otherwise. The whole body is kept in memory so that the handler can read
// it again, hence a bound that suits forms rather than uploads.
const DefaultMaxBodyBytes = 1 << 20

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware) error

// ErrorHandler writes the answer to a request whose token did not pass.
// status is the one the middleware would use (400, 403, 413, 500 or 503)
// and err the reason, wrapping one of the package's sentinels.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, status int, err error)

type middleware struct {
	v        *Verifier
	header   string
	maxBody  int64
	remoteIP func(*http.Request) string
	failOpen bool
	onError  ErrorHandler
}

// Middleware returns a middleware that lets a request reach the next
// handler only with a token that v accepts. Wrap only the routes the bot
// check is for (a sign-up or log-in POST), and put it before any rate
// limit, so that bots are turned away before they consume anyone's quota.
//
// The token is read from the WithTokenHeader header when one is configured
// and present, otherwise from the FormField field of an
// application/x-www-form-urlencoded or multipart/form-data body, of which
// at most DefaultMaxBodyBytes (WithMaxBodyBytes) are read. A body read this
// way is handed to the next handler intact, as if never read. The query
// string is never looked at: tokens do not belong in logged URLs.
//
// A request that does not pass gets an RFC 9457 application/problem+json
// answer (replaceable with WithErrorHandler):
//
//	400  no token, a token over MaxTokenLength, an unparsable form
//	403  the token was rejected (ErrRejected)
//	413  the body is over the bound, so the token cannot be looked for
//	500  siteverify refused the secret or the request (ErrMisconfigured),
//	     or the remote IP function returned something that is not an IP
//	503  siteverify could not be asked (ErrUnavailable)
//
// The 503 is the fail-closed policy, the default: while siteverify cannot
// be reached nobody passes. WithFailOpen lets requests through instead.
// A request whose own context ends during the verification (the visitor
// hung up, or a deadline set upstream passed) never reaches the handler,
// even under WithFailOpen, and is not retried: the error handler gets it
// with 503 and an error wrapping the context's error rather than
// ErrUnavailable.
//
// A request that passes reaches the handler with the Result in its context
// (FromContext).
func Middleware(v *Verifier, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: nil Verifier", ErrInvalidOption)
	}
	m := &middleware{v: v, maxBody: DefaultMaxBodyBytes, remoteIP: PeerIP, onError: WriteProblem}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil middleware option", ErrInvalidOption)
		}
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(next, w, r)
		})
	}, nil
}

// WithTokenHeader makes the middleware look for the token in the request
// header name first, for clients that post JSON (for example a
// single-page app sending "CF-Turnstile-Response"). When the header is
// absent the form field is still looked for.
func WithTokenHeader(name string) MiddlewareOption {
	return func(m *middleware) error {
		if name == "" {
			return fmt.Errorf("%w: empty token header name", ErrInvalidOption)
		}
		m.header = name
		return nil
	}
}

// WithMaxBodyBytes sets how much of a form body is read, and buffered, to
// find the token (default DefaultMaxBodyBytes). A larger body gets 413.
func WithMaxBodyBytes(n int64) MiddlewareOption {
	return func(m *middleware) error {
		if n <= 0 {
			return fmt.Errorf("%w: max body bytes %d must be positive", ErrInvalidOption, n)
		}
		m.maxBody = n
		return nil
	}
}

// WithRemoteIP sets the function giving the visitor's IP address, sent to
// siteverify as remoteip. The default, PeerIP, is the TCP peer: right when
// clients connect directly, wrong behind a load balancer or CDN, where
// every visitor would appear to be the proxy. Behind proxies pass the same
// trusted-proxy client-IP resolution the rate limit uses: floodgate's
// KeyByIP with the same trusted proxies, but without IPv6 prefix
// aggregation (a /128), so that it yields an address rather than a
// prefix, wrapped to return "" on error. The function may return "" to
// send no remoteip; anything else that is not an IP address gets 500.
func WithRemoteIP(f func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) error {
		if f == nil {
			return fmt.Errorf("%w: nil remote IP function", ErrInvalidOption)
		}
		m.remoteIP = f
		return nil
	}
}

// WithFailOpen lets requests through to the handler, without a Result in
// their context, while siteverify cannot be asked (ErrUnavailable). It
// trades the bot check for availability during a Cloudflare outage; the
// rate limit behind it then is the only defence. Rejected tokens, missing
// tokens, a misconfigured secret (a redirecting endpoint included) and
// requests whose own context ended (the visitor hung up) are still
// refused.
func WithFailOpen() MiddlewareOption {
	return func(m *middleware) error {
		m.failOpen = true
		return nil
	}
}

// WithErrorHandler replaces the problem+json answer (WriteProblem) with h,
// for services with their own error envelope or that log failures.
func WithErrorHandler(h ErrorHandler) MiddlewareOption {
	return func(m *middleware) error {
		if h == nil {
			return fmt.Errorf("%w: nil error handler", ErrInvalidOption)
		}
		m.onError = h
		return nil
	}
}

// PeerIP returns the IP address of the request's TCP peer
// (Request.RemoteAddr without its port), or "" when RemoteAddr is not an
// address. It is the middleware's default remote IP function.
func PeerIP(r *http.Request) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return ap.Addr().Unmap().WithZone("").String()
}

// errBodyTooLarge reports a form body over the middleware's bound.
var errBodyTooLarge = errors.New("turnstile: request body too large to look for the token")

// errMalformedForm reports a form body that cannot be parsed.
var errMalformedForm = errors.New("turnstile: malformed form body")

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	token, body, err := m.token(r)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errBodyTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		m.onError(w, r, status, err)
		return
	}
	res, err := m.v.Verify(r.Context(), token, m.remoteIP(r))
	r2 := r
	if body != nil {
		// Handlers must not modify the request they were given, so the
		// restored body goes on a shallow copy.
		r2 = r.WithContext(r.Context())
		r2.Body = body
	}
	if err != nil {
		// Fail open covers siteverify failing, never the visitor leaving:
		// a request whose context is done gets no free pass to a handler
		// that might not check its context.
		if m.failOpen && errors.Is(err, ErrUnavailable) && r.Context().Err() == nil {
			next.ServeHTTP(w, r2)
			return
		}
		m.onError(w, r, statusOf(err), err)
		return
	}
	next.ServeHTTP(w, r2.WithContext(context.WithValue(r2.Context(), resultKey{}, res)))
}

// statusOf maps a Verify error to the status the middleware answers with.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrRejected):
		return http.StatusForbidden
	case errors.Is(err, ErrMissingToken), errors.Is(err, ErrTokenTooLong):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The last two: the request's own context ended. A visitor who
		// hung up reads nothing; one whose server-side deadline passed
		// may retry.
		return http.StatusServiceUnavailable
	default: // ErrMisconfigured, ErrInvalidRemoteIP
		return http.StatusInternalServerError
	}
}

// token finds the request's token. When it had to read the body, it also
// returns a replacement body holding the same bytes.
func (m *middleware) token(r *http.Request) (string, io.ReadCloser, error) {
	if m.header != "" {
		if t := r.Header.Get(m.header); t != "" {
			return t, nil, nil
		}
	}
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mediaType != "application/x-www-form-urlencoded" && mediaType != "multipart/form-data") || r.Body == nil {
		return "", nil, ErrMissingToken
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, m.maxBody+1))
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", errMalformedForm, err)
	}
	if int64(len(raw)) > m.maxBody {
		return "", nil, fmt.Errorf("%w: over %d bytes", errBodyTooLarge, m.maxBody)
	}
	var token string
	if mediaType == "multipart/form-data" {
		token, err = multipartField(raw, params["boundary"])
	} else {
		token, err = urlencodedField(raw)
	}
	if err != nil {
		return "", nil, err
	}
	if token == "" {
		return "", nil, ErrMissingToken
	}
	// The whole body was read, so the handler gets the same bytes again;
	// closing goes to the original body, as the server expects.
	return token, replayBody{Reader: bytes.NewReader(raw), Closer: r.Body}, nil
}

// replayBody is a request body whose bytes were already read, closed
// through the original body.
type replayBody struct {
	io.Reader
	io.Closer
}

func urlencodedField(raw []byte) (string, error) {
	vals, err := url.ParseQuery(string(raw))
	if err != nil {
		return "", fmt.Errorf("%w: %w", errMalformedForm, err)
	}
	return vals.Get(FormField), nil
}

// multipartField returns the first FormField part of a multipart body,
// reading no more of it than a token can be long.
func multipartField(raw []byte, boundary string) (string, error) {
	if boundary == "" {
		return "", fmt.Errorf("%w: multipart body without boundary", errMalformedForm)
	}
	mr := multipart.NewReader(bytes.NewReader(raw), boundary)
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("%w: %w", errMalformedForm, err)
		}
		if p.FormName() != FormField {
			continue
		}
		v, err := io.ReadAll(io.LimitReader(p, MaxTokenLength+1))
		if err != nil {
			return "", fmt.Errorf("%w: %w", errMalformedForm, err)
		}
		return string(v), nil
	}
}

type resultKey struct{}

// FromContext returns the Result the Middleware stored in a request's
// context, and whether there was one: false when the handler was not
// reached through the middleware, or was reached with WithFailOpen while
// siteverify was unavailable.
func FromContext(ctx context.Context) (*Result, bool) {
	res, ok := ctx.Value(resultKey{}).(*Result)
	return res, ok
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Codes  []string `json:"error-codes,omitempty"`
}

// WriteProblem is the default ErrorHandler: an RFC 9457
// application/problem+json answer whose detail names what the visitor can
// act on, never the server's configuration, with Cloudflare's error codes
// for a rejection. An ErrorHandler that only wants to log can end by
// calling it.
func WriteProblem(w http.ResponseWriter, _ *http.Request, status int, err error) {
	p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status}
	var rej *RejectedError
	switch {
	case errors.As(err, &rej):
		p.Detail = "The bot check rejected the token; solve the challenge again."
		p.Codes = rej.Codes
	case errors.Is(err, ErrMissingToken):
		p.Detail = "The request carries no bot-check token."
	case errors.Is(err, ErrTokenTooLong):
		p.Detail = "The bot-check token is longer than a token can be."
	case errors.Is(err, errMalformedForm):
		p.Detail = "The form body cannot be parsed."
	case errors.Is(err, errBodyTooLarge):
		p.Detail = "The request body is too large."
	case status == http.StatusServiceUnavailable:
		p.Detail = "The bot check cannot be completed right now; try again later."
	default:
		p.Detail = "The bot check is misconfigured on the server."
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
