package floodgate

import (
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
)

// HeaderStyle selects the quota values sent with allowed and denied
// answers: as HTTP headers by the middleware, as response metadata by
// other transports' adapters.
//
// The values are shared between responses, so that a call allocates
// nothing for them: a handler may replace them (Header.Set, Header.Add,
// Header.Del) but must not write into their slices in place.
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
	// t never exceeds w: a longer wait (a sliding log's rounded up, a
	// sliding counter's estimate reaching into the next window) is shown
	// as w, and Retry-After keeps the exact wait. The exception is a key
	// in debt under WithCostAfter, whose wait really is longer than a
	// window: there t says so. Waits too long for a
	// Duration's seconds (about 292 years) saturate, in every header,
	// instead of wrapping.
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

// RetryAfterSeconds returns the Retry-After value for a wait: the wait in
// whole seconds, rounded up, and at least 1 (a client told to retry after 0
// seconds would retry at once and be denied again). It cannot overflow:
// the longest Duration gives 9223372037.
func RetryAfterSeconds(wait time.Duration) int64 {
	return max(ceilSeconds(wait), 1)
}

// ceilSeconds rounds a duration up to whole seconds; a negative one is 0.
// Dividing first keeps the longest durations from wrapping, as adding
// time.Second-1 before dividing would.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// Quota holds the quota values of one Outcome, computed by the admission
// core once for every transport and formatted when an adapter asks for
// them, so that a call whose adapter sends none (a gRPC call allowed
// under grpclimit's default) formats nothing. An adapter writes them
// under its own names (the middleware as HTTP headers, a gRPC adapter as
// metadata, in lower case). Each method returns nil when the value is
// not to be sent (the HeaderStyle leaves it out, or the outcome has no
// such value), and otherwise a one-element slice that may be shared
// with other calls: assign it into an http.Header or a metadata map,
// never write into it (appending is safe: its capacity is 1).
//
// A Quota is a small value, copied by value; its methods format on
// every call, allocating at most a share of a block of values (see
// headerValue), and nothing when a recent call had the same value.
type Quota struct {
	p *policy // formats RateLimit; nil for a zero Quota
	// ratePolicy is the RateLimit-Policy value, already looked up: the
	// window it advertises bounds t.
	ratePolicy *[1]string
	remaining  int   // clamped to [0, limit]
	limit      int   // never negative
	t          int64 // RateLimit's t, seconds
	reset      int64 // the legacy reset, Unix seconds
	retryAfter int64 // seconds; 0 when Retry-After is not sent
	has        quotaParts
}

// quotaParts says which values a Quota sends, beside RateLimit-Policy
// and Retry-After, whose presence their own fields say.
type quotaParts uint8

const (
	partRateLimit    quotaParts = 1 << iota // RateLimit
	partLegacyLimit                         // X-RateLimit-Limit
	partLegacyCounts                        // X-RateLimit-Remaining and -Reset
)

// slice returns v as a header value, or nil.
func slice(v *[1]string) []string {
	if v == nil {
		return nil
	}
	return v[:]
}

// RetryAfter is the wait in whole seconds, rounded up and at least 1
// (RetryAfterSeconds): set on a blocked denial that waiting cures.
func (q Quota) RetryAfter() []string { return slice(q.retryAfterValue()) }

// RateLimitPolicy is the IETF RateLimit-Policy field, e.g.
// "default";q=10;w=600 (HeadersIETF, HeadersBoth).
func (q Quota) RateLimitPolicy() []string { return slice(q.ratePolicy) }

// RateLimit is the IETF RateLimit field, e.g. "default";r=3;t=42
// (HeadersIETF, HeadersBoth); not set for a cost that can never fit.
func (q Quota) RateLimit() []string { return slice(q.rateLimitValue()) }

// Limit is the legacy X-RateLimit-Limit value (HeadersLegacy, HeadersBoth).
func (q Quota) Limit() []string { return slice(q.limitValue()) }

// Remaining is the legacy X-RateLimit-Remaining value; not set for a
// cost that can never fit.
func (q Quota) Remaining() []string { return slice(q.remainingValue()) }

// Reset is the legacy X-RateLimit-Reset value, the Unix time in seconds
// at which the full quota is back; not set for a cost that can never fit.
func (q Quota) Reset() []string { return slice(q.resetValue()) }

// The values of a Quota, formatted (or found formatted), nil when not sent.

func (q *Quota) retryAfterValue() *[1]string {
	if q.retryAfter == 0 {
		return nil
	}
	return intValue(q.retryAfter)
}

func (q *Quota) rateLimitValue() *[1]string {
	if q.has&partRateLimit == 0 {
		return nil
	}
	return q.p.rateLimitField(q.remaining, q.t)
}

func (q *Quota) limitValue() *[1]string {
	if q.has&partLegacyLimit == 0 {
		return nil
	}
	return intValue(int64(q.limit))
}

func (q *Quota) remainingValue() *[1]string {
	if q.has&partLegacyCounts == 0 {
		return nil
	}
	return intValue(int64(q.remaining))
}

func (q *Quota) resetValue() *[1]string {
	if q.has&partLegacyCounts == 0 {
		return nil
	}
	return intValue(q.reset)
}

// quotaRequest is what the quota values of one decision depend on.
type quotaRequest struct {
	style HeaderStyle
	d     *Decision
	// retry: send Retry-After (a blocked denial that waiting cures).
	retry bool
	// costExceeded: the call can never succeed; only the policy is
	// advertised, since the Decision carries no real remaining quota.
	costExceeded bool
	// debts: the key may owe more than its quota (WithCostAfter), so a
	// wait beyond the window is the truth, not an estimate's overshoot.
	debts bool
	// rate is the rate decided under (policy.rateOf), for the window;
	// the zero Rate when unknown.
	rate Rate
	// now is read only for the legacy reset timestamp.
	now func() time.Time
}

// quota computes the quota values of a decision under p into q, which
// must be zero. It formats nothing but RateLimit-Policy, which a table of
// the policy's recent quotas holds (its window bounds t): the rest is
// formatted when an adapter asks (Quota's methods).
//
// The values never lie, whatever the limiter reports: counts are clamped
// to what they can mean (Remaining within [0, Limit]), waits saturate
// instead of wrapping, and RateLimit's t is at most the policy's window
// w, so that no client reads a reset beyond the window the policy
// advertises (a sliding log's wait rounded up, or a sliding counter's
// estimate across two windows, can exceed it; Retry-After keeps the
// exact wait) — except where the key may be in debt (WithCostAfter):
// there a wait beyond the window is the truth, and t says it.
func (p *policy) quota(qr *quotaRequest, q *Quota) {
	d := qr.d
	q.p = p
	q.limit = max(d.Limit, 0)
	q.remaining = min(max(d.Remaining, 0), q.limit)
	if qr.retry {
		q.retryAfter = RetryAfterSeconds(d.RetryAfter)
	}
	if qr.style.ietf() {
		var window int64
		q.ratePolicy, window = p.policyField(q.limit, qr.rate)
		if !qr.costExceeded {
			// t: on a denial, when the request can be retried; otherwise
			// when the full quota is back.
			t := ceilSeconds(d.ResetAfter)
			if !d.Allowed {
				t = RetryAfterSeconds(d.RetryAfter)
			}
			if window > 0 && t > window && !qr.debts {
				t = window
			}
			q.t = t
			q.has |= partRateLimit
		}
	}
	if qr.style.legacy() {
		q.has |= partLegacyLimit
		if !qr.costExceeded {
			q.has |= partLegacyCounts
			// The full quota is back after ResetAfter, whether or not this
			// request was denied; rounded up to the second. Both terms are
			// below 2^34 for any real clock: the sum cannot wrap.
			q.reset = qr.now().Unix() + ceilSeconds(d.ResetAfter)
		}
	}
}

// policyFieldCache memoizes the RateLimit-Policy value for one quota, so the
// hot path formats it once rather than on every request. Its values change
// only with the policy's rate or a key's plan, not from one request to the
// next, so the table hits under a quota that drains as well.
type policyFieldCache struct {
	limit  int
	rate   Rate
	window int64     // w in seconds; 0 when unknown
	value  [1]string // value[:] is the header value
}

// policyFieldSlots is the size of each policy's table of RateLimit-Policy
// values: one quota per policy, or a few plans (PlanLimiter) at once.
const policyFieldSlots = 8

// rateLimitSlots is the size of each policy's table of RateLimit values:
// enough for the pairs one busy second produces on a small quota.
const (
	rateLimitBits  = 6
	rateLimitSlots = 1 << rateLimitBits
)

// policyField returns the RateLimit-Policy value for a quota of limit
// units under rate r, and its window w in seconds (0 when unknown). The
// window is the time the limiter takes to refill limit units from empty:
// Period for a window, burst·Period/Limit for a token bucket.
func (p *policy) policyField(limit int, r Rate) (*[1]string, int64) {
	slot := &p.field[(uint64(limit)^uint64(r.Period)^uint64(r.Limit)*31)%policyFieldSlots]
	if c := slot.Load(); c != nil && c.limit == limit && c.rate == r {
		return &c.value, c.window
	}
	var window time.Duration
	if r.Limit > 0 && limit > 0 {
		// limit·Period in 128 bits: a long period times a large quota
		// overflows int64. A window beyond int64 is left out.
		hi, lo := bits.Mul64(uint64(limit), uint64(r.Period))
		if hi < uint64(r.Limit) {
			if q, _ := bits.Div64(hi, lo, uint64(r.Limit)); q <= math.MaxInt64 {
				window = time.Duration(q)
			}
		}
	}
	c := &policyFieldCache{limit: limit, rate: r, window: ceilSeconds(window)}
	c.value[0] = formatPolicyField(p.quoted, limit, c.window)
	slot.Store(c)
	return &c.value, c.window
}

// rateLimitField returns the RateLimit value for remaining units and t
// seconds: from the policy's table when a recent request had the same
// (the first requests of many clients do: r=9;t=60 for every client's
// first of 10 a minute), else formatted into a block of values
// (headerValue), which costs no allocation of its own, so that a miss —
// every request of a draining quota — costs no more than having no
// table would.
func (p *policy) rateLimitField(remaining int, t int64) *[1]string {
	// Fibonacci hashing of the pair: remaining and t both vary in their
	// low bits, which the top bits of the product mix.
	h := (uint64(remaining)*31 + uint64(t)) * 0x9e3779b97f4a7c15
	slot := &p.rateLimit[h>>(64-rateLimitBits)]
	if v := slot.Load(); v != nil && v.a == int64(remaining) && v.b == t {
		return &v.value
	}
	var buf [64]byte // holds a 20-character name with the largest numbers; a longer one spills to the heap
	v := newHeaderValue(int64(remaining), t, appendRateLimit(buf[:0], p.quoted, remaining, t))
	slot.Store(v)
	return &v.value
}

// intSlots is the size of the table of integer values.
const intSlots = 256

// intValues holds recently formatted integer values (Retry-After, the
// legacy headers), one per slot: a denial of one second shares its
// Retry-After with the other denials of that second.
var intValues [intSlots]atomic.Pointer[headerValue]

// intValue returns n formatted as a header value.
func intValue(n int64) *[1]string {
	slot := &intValues[uint64(n)%intSlots]
	if v := slot.Load(); v != nil && v.a == n {
		return &v.value
	}
	var buf [20]byte
	v := newHeaderValue(n, 0, strconv.AppendInt(buf[:0], n, 10))
	slot.Store(v)
	return &v.value
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

// formatPolicyField formats the RateLimit-Policy value of a policy whose
// quota is limit units, refilled from empty in window seconds (0:
// unknown, w is left out).
func formatPolicyField(quoted string, limit int, window int64) string {
	b := make([]byte, 0, len(quoted)+32)
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(limit), 10)
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, window, 10)
	}
	return string(b)
}

// appendRateLimit appends the RateLimit value to b:
// quoted;r=remaining;t=seconds.
func appendRateLimit(b []byte, quoted string, remaining int, t int64) []byte {
	b = append(b, quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, t, 10)
}
