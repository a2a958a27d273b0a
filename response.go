package floodgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
)

// Header keys in canonical form (textproto.CanonicalMIMEHeaderKey), so that
// the middleware can assign to the http.Header map directly: Header.Set
// would canonicalize the key on every request.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerLegacyLimit     = "X-Ratelimit-Limit"
	headerLegacyRemaining = "X-Ratelimit-Remaining"
	headerLegacyReset     = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
	headerContentType     = "Content-Type"
)

// Content types of the bodies written here.
const (
	contentTypeProblem = "application/problem+json"
	contentTypeJSON    = "application/json"
)

// Content-Type values shared by every response, to save an allocation on
// the denied path. Capped at one element so that Header.Add copies; nothing
// in net/http writes into a header value in place.
var (
	problemContentType = []string{contentTypeProblem}[:1:1]
	jsonContentType    = []string{contentTypeJSON}[:1:1]
)

// SetHeaders writes the quota values into h under their HTTP header
// names (RateLimit-Policy, RateLimit, the legacy X-RateLimit-*,
// Retry-After), as the middleware does: for an adapter whose transport
// speaks HTTP headers (connect) or reads them from an http.Header. A
// RateLimit or RateLimit-Policy list already in h gets the values as a
// further member.
func (q Quota) SetHeaders(h http.Header) { writeQuota(h, &q) }

// writeQuota sets the quota values of an outcome as headers on h. The
// IETF fields are lists: when an outer middleware has set them already,
// the value is added as a member of its own, so each limit a request
// passed through shows. The other headers, which hold one limit, are
// replaced.
func writeQuota(h http.Header, q *Quota) {
	// A response without headers yet (the common case) has no list to
	// append to: skip the lookups, which cost as much as the assignment.
	fresh := len(h) == 0
	if v := q.retryAfterValue(); v != nil {
		h[headerRetryAfter] = v[:]
	}
	if q.ratePolicy != nil {
		addMember(h, fresh, headerRateLimitPolicy, q.ratePolicy[:])
	}
	if v := q.rateLimitValue(); v != nil {
		addMember(h, fresh, headerRateLimit, v[:])
	}
	if v := q.limitValue(); v != nil {
		h[headerLegacyLimit] = v[:]
	}
	if v := q.remainingValue(); v != nil {
		h[headerLegacyRemaining] = v[:]
	}
	if v := q.resetValue(); v != nil {
		h[headerLegacyReset] = v[:]
	}
}

// addMember sets a list field, or adds v to the list already there.
func addMember(h http.Header, fresh bool, key string, v []string) {
	if !fresh {
		if old := h[key]; len(old) > 0 {
			h[key] = append(old[:len(old):len(old)], v...)
			return
		}
	}
	h[key] = v
}

// DeniedHandler writes the response to a request the limit refused. When
// it is called, the middleware has already set Retry-After (unless the
// request can never succeed because its cost exceeds the limit; then
// d.RetryAfter is zero) and the quota headers of its HeaderStyle. It must
// write the status and the body. The status should be
// http.StatusTooManyRequests, or http.StatusServiceUnavailable for a
// denial marked d.Overloaded (a service-wide in-flight cap: no doing of
// the client's), as ProblemDetails and StaticJSON do.
//
// A denied call under WithWait was refused at once: its turn was too far
// off, or too many calls were waiting already.
type DeniedHandler func(w http.ResponseWriter, r *http.Request, d Decision)

// ProblemDetails is the default DeniedHandler. It answers 429 with an RFC
// 9457 application/problem+json body:
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"Rate limit exceeded; retry after 42 seconds.","retryAfter":42}
//
// retryAfter, an extension member, repeats the Retry-After header in
// seconds. A request whose cost exceeds the limit gets a detail saying so
// and no retryAfter, since waiting does not help. A denial marked
// Overloaded (the service is at a service-wide in-flight cap) is answered
// 503 Service Unavailable, with the same Retry-After.
func ProblemDetails(w http.ResponseWriter, _ *http.Request, d Decision) {
	var body []byte
	switch {
	case d.Overloaded:
		body = busyBody(RetryAfterSeconds(d.RetryAfter))
	case d.RetryAfter > 0:
		body = deniedBody(RetryAfterSeconds(d.RetryAfter))
	default:
		body = costExceededBody
	}
	w.Header()[headerContentType] = problemContentType
	w.WriteHeader(deniedStatus(d))
	_, _ = w.Write(body) // the client may be gone; nothing to do about it
}

// deniedStatus is the status of a denial: 503 when the service is at a
// service-wide capacity, 429 when the client is at its own limit.
func deniedStatus(d Decision) int {
	if d.Overloaded {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// busyBody is the ProblemDetails body of an Overloaded denial: the
// service is at its in-flight cap, not the client at its limit. Rarer
// than denials, so formatted each time.
func busyBody(secs int64) []byte {
	b := make([]byte, 0, 160)
	b = append(b, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The service is at capacity; retry after `...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, ` seconds.","retryAfter":`...)
	b = strconv.AppendInt(b, secs, 10)
	return append(b, '}')
}

// deniedBodySlots is the size of the table of recent denial bodies.
const deniedBodySlots = 64

type deniedBodyValue struct {
	secs int64
	body []byte
}

// deniedBodies holds the ProblemDetails bodies of recent retry delays: the
// denied path is the one an attacker drives, and every denial of one
// second says the same, so it is formatted once. Write must not modify
// or retain its argument (io.Writer), so sharing is safe.
var deniedBodies [deniedBodySlots]atomic.Pointer[deniedBodyValue]

// costExceededBody is the ProblemDetails body of a request that can never
// succeed.
var costExceededBody = []byte(`{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"The request costs more than the rate limit allows and cannot succeed."}`)

// deniedBody returns the ProblemDetails body for a retry after secs.
func deniedBody(secs int64) []byte {
	slot := &deniedBodies[uint64(secs)%deniedBodySlots]
	if v := slot.Load(); v != nil && v.secs == secs {
		return v.body
	}
	b := make([]byte, 0, 128)
	b = append(b, `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry after `...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, ` seconds.","retryAfter":`...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, '}')
	slot.Store(&deniedBodyValue{secs: secs, body: b})
	return b
}

// StaticJSON returns a DeniedHandler that answers 429 (503 for a denial
// marked Decision.Overloaded) with body, byte for byte, as
// application/json: the service's own error envelope, such as
//
//	{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}
//
// The body must be valid JSON (the error wraps ErrInvalidOption
// otherwise); it is copied, so the caller may reuse its slice.
func StaticJSON(body []byte) (DeniedHandler, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: denied body is not valid JSON", ErrInvalidOption)
	}
	b := append([]byte(nil), body...)
	return func(w http.ResponseWriter, _ *http.Request, d Decision) {
		w.Header()[headerContentType] = jsonContentType
		w.WriteHeader(deniedStatus(d))
		_, _ = w.Write(b)
	}, nil
}

// ErrorHandler writes the response when no decision could be made: the key
// function, the cost function or the limiter returned an error (not
// ErrCostExceedsLimit, which is a denial). err wraps the cause; test it
// with errors.Is (ErrNoKey, ErrNoClientIP, a store's error), or ask
// ErrorStatus for the status that fits it. It is not called for a request
// whose client went away during the decision (see WithFailOpen).
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// ErrorStatus returns the HTTP status that answers a request on which no
// decision could be made because of err:
//
//   - 400 Bad Request for what the client caused: no key (ErrNoKey, once
//     no policy applies), an unusable client address (ErrNoClientIP), a
//     key too long to store (ErrKeyTooLong), a body a key function cannot
//     read (ErrInvalidBody), a key the request gives two ways
//     (ErrAmbiguousKey). A long key gets 400 rather than 431 because
//     the key may come from the path, the query or the body as well as a
//     header, and 431 would tell the client to shrink its headers.
//   - 413 Content Too Large for a body above a key function's bound
//     (ErrInvalidBody together with an *http.MaxBytesError).
//   - 500 Internal Server Error for a misconfiguration the server must fix
//     (ErrInvalidOption, e.g. KeyByRoutePattern outside a ServeMux, or a
//     cost function that returned a negative cost).
//   - 503 Service Unavailable for the rest: the limiter or its store
//     failed, or a key or cost function failed with an error of its own
//     (a lookup that failed, a body it cannot parse), which the client
//     can only wait out or the server must look into.
//
// WithFailOpen applies to the limiter's failures alone: a 503 for a key
// or cost function's own error is never let through (OutcomeKeyFailed),
// since a client that could provoke it would pass uncounted. A key or
// cost function that means "the client's fault" wraps ErrInvalidBody, and
// gets 400.
func ErrorStatus(err error) int {
	switch errorKind(err) {
	case OutcomeMisconfigured:
		return http.StatusInternalServerError
	case OutcomeClientError:
		var tooLarge *http.MaxBytesError
		if errors.Is(err, ErrInvalidBody) && errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// FailClosed is the default ErrorHandler: it refuses the request with the
// status ErrorStatus gives err (503 when the limiter failed, 400 or 413
// for the client's own doing, 500 for a misconfiguration) and an RFC 9457
// problem+json body that does not reveal the error (the client cannot fix
// a failure and an attacker should not learn the limiter's internals). A
// custom ErrorHandler can delegate to it for the errors it does not
// handle itself.
func FailClosed(w http.ResponseWriter, _ *http.Request, err error) {
	switch status := ErrorStatus(err); status {
	case http.StatusBadRequest:
		writeProblem(w, status, problemBadRequest)
	case http.StatusRequestEntityTooLarge:
		writeProblem(w, status, problemTooLarge)
	case http.StatusInternalServerError:
		writeProblem(w, status, problemMisconfigured)
	default:
		writeProblem(w, http.StatusServiceUnavailable, problemUnavailable)
	}
}

// The fixed problem+json bodies of FailClosed and Middleware.
var (
	problemBadRequest = problemJSON(http.StatusBadRequest, "Bad Request",
		"The request does not carry what the rate limit needs to identify its client.")
	problemTooLarge = problemJSON(http.StatusRequestEntityTooLarge, "Content Too Large",
		"The request body is larger than the rate limit reads.")
	problemMisconfigured = problemJSON(http.StatusInternalServerError, "Internal Server Error",
		"The rate limiter is misconfigured.")
	problemUnavailable = problemJSON(http.StatusServiceUnavailable, "Service Unavailable",
		"The rate limiter could not decide on this request; try again later.")
)

// problemJSON formats a fixed RFC 9457 problem+json body.
func problemJSON(status int, title, detail string) []byte {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail}) // plain strings: cannot fail
	return body
}

// writeProblem writes a problem+json response.
func writeProblem(w http.ResponseWriter, status int, body []byte) {
	w.Header()[headerContentType] = problemContentType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// StatusClientClosedRequest is the status the middleware logs a request
// with when its client went away while the limiter was deciding: nginx's
// 499 "Client Closed Request". Nothing reads the response; the status is
// there so that access logs and metrics do not count such a request as
// served, denied or failed by the limiter. No body is written.
const StatusClientClosedRequest = 499
