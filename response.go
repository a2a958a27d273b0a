package floodgate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// HeaderStyle selects the quota headers the middleware sets on allowed and
// denied responses.
type HeaderStyle int

// Header styles.
const (
	// HeadersIETF sets the structured fields of
	// draft-ietf-httpapi-ratelimit-headers-11:
	//
	//	RateLimit-Policy: "default";q=10;w=600
	//	RateLimit: "default";r=3;t=42
	//
	// q is Decision.Limit; w, in seconds, is the time the limiter takes to
	// refill q units from empty, shown only when the limiter reports its
	// Rate (as the in-memory limiters do); r is Decision.Remaining. t is
	// the number of seconds until more quota is available: on a denial the
	// same value as Retry-After, on an allowed request the time until the
	// full quota is back (Decision.ResetAfter rounded up), an upper bound
	// since a Decision does not say when the next single unit arrives.
	// When several middlewares limit one request (an IP limit around an
	// account limit, say), each adds its member to both lists, as the
	// draft allows; the legacy headers and Retry-After, which cannot
	// hold more than one limit, are those of the innermost.
	//
	// This is the default.
	HeadersIETF HeaderStyle = iota
	// HeadersLegacy sets X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, the last one as a Unix time in seconds at which
	// the full quota is back, as GitHub's API does.
	HeadersLegacy
	// HeadersBoth sets the IETF fields and the legacy headers.
	HeadersBoth
	// HeadersNone sets no quota headers. Denied responses still carry
	// Retry-After.
	HeadersNone
)

func (s HeaderStyle) ietf() bool   { return s == HeadersIETF || s == HeadersBoth }
func (s HeaderStyle) legacy() bool { return s == HeadersLegacy || s == HeadersBoth }

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

// RetryAfterSeconds returns the Retry-After value for a wait: the wait in
// whole seconds, rounded up, and at least 1 (a client told to retry after 0
// seconds would retry at once and be denied again).
func RetryAfterSeconds(wait time.Duration) int64 {
	s := ceilSeconds(wait)
	if s < 1 {
		return 1
	}
	return s
}

// ceilSeconds rounds a non-negative duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// quotedSFString returns name as an sf-string of RFC 9651 (Structured Field
// Values): quoted, with backslash and quote escaped. validPolicyName must
// have accepted it.
func quotedSFString(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}

// validPolicyName reports whether name can be sent as an sf-string: a
// non-empty run of printable ASCII (RFC 9651 allows nothing else in a
// String).
func validPolicyName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty policy name", ErrInvalidOption)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: policy name %q: only printable ASCII can be sent in RateLimit-Policy", ErrInvalidOption, name)
		}
	}
	return nil
}

// policyField formats the RateLimit-Policy value of a policy whose quota is
// limit units, refilled from empty in window (0: unknown, w is left out).
func policyField(quoted string, limit int, window time.Duration) string {
	b := make([]byte, 0, len(quoted)+32)
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(limit), 10)
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(window), 10)
	}
	return string(b)
}

// rateLimitField formats the RateLimit value: quoted;r=remaining;t=seconds.
// It builds the value in a stack buffer so that the only allocation is the
// resulting string. 64 bytes hold a 20-character name with the largest
// numbers; a longer name spills to the heap, which is only slower. (The
// buffer is zeroed on every call, so bigger is not free.)
func rateLimitField(quoted string, remaining int, reset int64) string {
	var buf [64]byte
	b := append(buf[:0], quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	return string(b)
}

// setQuotaHeaders sets the quota headers of style for decision d of policy
// p, and Retry-After if retry is set. costExceeded reports a request that
// can never succeed: only the policy is advertised then, since the Decision
// carries no real remaining quota. now is read only for the legacy reset
// timestamp.
//
// The header values share one backing array: one allocation for all of
// them instead of one per header. Each slice is capped at its single
// element, so a later Header.Add reallocates instead of writing into its
// neighbour.
func setQuotaHeaders(h http.Header, style HeaderStyle, p *policy, d Decision, retry, costExceeded bool, now func() time.Time) {
	n := 0
	if retry {
		n++
	}
	if style.ietf() {
		n += 2
	}
	if style.legacy() {
		n += 3
	}
	if n == 0 {
		return
	}
	vals := make([]string, n)
	i := 0
	put := func(key, v string) {
		vals[i] = v
		h[key] = vals[i : i+1 : i+1]
		i++
	}
	// add appends to a list field that an outer middleware already set:
	// each limit a request passed through shows as its own list member.
	// A response without headers yet (the common case) has no list to
	// append to: skip the lookup, which costs as much as the assignment.
	fresh := len(h) == 0
	add := func(key, v string) {
		if !fresh {
			if old := h[key]; len(old) > 0 {
				h[key] = append(old[:len(old):len(old)], v)
				return
			}
		}
		put(key, v)
	}
	if retry {
		put(headerRetryAfter, strconv.FormatInt(RetryAfterSeconds(d.RetryAfter), 10))
	}
	if style.ietf() {
		add(headerRateLimitPolicy, p.policyValue(d.Limit))
		if !costExceeded {
			// t: on a denial, when the request can be retried; otherwise
			// when the full quota is back.
			t := ceilSeconds(d.ResetAfter)
			if !d.Allowed {
				t = RetryAfterSeconds(d.RetryAfter)
			}
			add(headerRateLimit, rateLimitField(p.quoted, d.Remaining, t))
		}
	}
	if style.legacy() {
		put(headerLegacyLimit, strconv.Itoa(d.Limit))
		if !costExceeded {
			put(headerLegacyRemaining, strconv.Itoa(d.Remaining))
			// The full quota is back after ResetAfter, whether or not this
			// request was denied; rounded up to the second.
			put(headerLegacyReset, strconv.FormatInt(now().Add(d.ResetAfter+time.Second-1).Unix(), 10))
		}
	}
}

// DeniedHandler writes the response to a request the limit refused. When
// it is called, the middleware has already set Retry-After (unless the
// request can never succeed because its cost exceeds the limit; then
// d.RetryAfter is zero) and the quota headers of its HeaderStyle. It must
// write the status, which should be http.StatusTooManyRequests, and the
// body.
type DeniedHandler func(w http.ResponseWriter, r *http.Request, d Decision)

// ProblemDetails is the default DeniedHandler. It answers 429 with an RFC
// 9457 application/problem+json body:
//
//	{"type":"about:blank","title":"Too Many Requests","status":429,
//	 "detail":"Rate limit exceeded; retry after 42 seconds.","retryAfter":42}
//
// retryAfter, an extension member, repeats the Retry-After header in
// seconds. A request whose cost exceeds the limit gets a detail saying so
// and no retryAfter, since waiting does not help.
func ProblemDetails(w http.ResponseWriter, _ *http.Request, d Decision) {
	bp := bodyPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"`...)
	if d.RetryAfter > 0 {
		s := RetryAfterSeconds(d.RetryAfter)
		b = append(b, "Rate limit exceeded; retry after "...)
		b = strconv.AppendInt(b, s, 10)
		b = append(b, ` seconds.","retryAfter":`...)
		b = strconv.AppendInt(b, s, 10)
		b = append(b, '}')
	} else {
		b = append(b, `The request costs more than the rate limit allows and cannot succeed."}`...)
	}
	w.Header()[headerContentType] = problemContentType
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(b) // the client may be gone; nothing to do about it
	*bp = b
	bodyPool.Put(bp)
}

// bodyPool recycles the buffers of ProblemDetails bodies: the denied path
// is the one an attacker drives, so it should not allocate per request.
// Write must not retain its argument (io.Writer), so reuse is safe.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// StaticJSON returns a DeniedHandler that answers 429 with body, byte for
// byte, as application/json: the service's own error envelope, such as
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
	return func(w http.ResponseWriter, _ *http.Request, _ Decision) {
		w.Header()[headerContentType] = jsonContentType
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write(b)
	}, nil
}

// ErrorHandler writes the response when no decision could be made: the key
// function, the cost function or the limiter returned an error (not
// ErrCostExceedsLimit, which is a denial). err wraps the cause; test it
// with errors.Is (ErrNoKey, ErrNoClientIP, a store's error).
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// FailClosed is the default ErrorHandler: it refuses the request with 503
// Service Unavailable and an RFC 9457 problem+json body that does not
// reveal the error (the client cannot fix it and an attacker should not
// learn the limiter's internals). A custom ErrorHandler can delegate to it
// for the errors it does not handle itself.
func FailClosed(w http.ResponseWriter, _ *http.Request, _ error) {
	writeProblem(w, http.StatusServiceUnavailable, "Service Unavailable",
		"The rate limiter could not decide on this request; try again later.")
}

// writeProblem writes a fixed RFC 9457 problem+json response.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail}) // plain strings: cannot fail
	w.Header()[headerContentType] = problemContentType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
