package floodgate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Policy is a named limit: a Limiter and the KeyFunc that picks the key it
// counts a request under. The name identifies the policy to clients in the
// RateLimit-Policy and RateLimit headers, so it should be stable and must
// be printable ASCII.
type Policy struct {
	// Name is shown in the quota headers, e.g. "nickname".
	Name string
	// Limiter decides for the key. It is the policy's own: a limiter
	// shared with another policy of a selector would count both policies'
	// keys together, and NewPolicySelector refuses it.
	Limiter Limiter
	// Key returns the key of a request, or an error wrapping ErrNoKey when
	// this policy does not apply to it (the next policy is then tried).
	Key KeyFunc
}

// PolicySelector picks, for each request, the limit keyed by its most
// meaningful signal. It holds an ordered list of policies and selects the
// first whose key function yields a key: a key function that returns an
// error wrapping ErrNoKey passes the request on to the next policy; any
// other error (or one that also wraps ErrInvalidOption, a misconfiguration)
// stops the selection and is returned, so a broken key function never
// silently lets a request fall through to a weaker limit.
//
// Sign-up abuse is the typical case: limit by the normalized nickname
// (abc1, abc2 → abc{NUM}) 5 per minute when a pattern can be formed, else
// by the client IP with a more lenient limit, so that users behind one NAT
// are not blocked together:
//
//	sel, err := floodgate.NewPolicySelector(
//		floodgate.Policy{Name: "nickname", Limiter: byNickname, Key: nicknamePattern},
//		floodgate.Policy{Name: "ip", Limiter: byIP, Key: clientIP},
//	)
//
// Use it from business code (Select, AllowN) or as middleware
// (NewPolicyMiddleware). A PolicySelector is safe for concurrent use.
type PolicySelector struct {
	policies []*policy
}

// policy is a validated Policy with what the middleware needs of it
// precomputed: its header parts, ready to be written, and its limiter's
// optional interfaces.
type policy struct {
	Policy
	quoted string // Name as an sf-string
	rate   Rate   // the limiter's rate, if it reports one
	field  atomic.Pointer[policyFieldCache]
	// rateLimit remembers the RateLimit values of recent (remaining, t)
	// pairs, so that the requests of one second share one string. A
	// fixed table: values an attacker chooses only cause misses.
	rateLimit [rateLimitSlots]atomic.Pointer[rateLimitValue]
	// evictions samples the limiter's Stats, if it has them.
	evictions liveEvictions
}

// policyFieldCache memoizes the RateLimit-Policy value for one quota, so the
// hot path formats it once rather than on every request.
type policyFieldCache struct {
	limit  int
	window int64     // w in seconds; 0 when unknown
	value  [1]string // value[:] is the header value
}

// rateLimitSlots is the size of each policy's table of RateLimit values:
// enough for the pairs one busy second produces on a small quota.
const (
	rateLimitBits  = 6
	rateLimitSlots = 1 << rateLimitBits
)

type rateLimitValue struct {
	remaining int
	t         int64
	value     [1]string
}

// rater is implemented by limiters that report their rate; the middleware
// then advertises the window (w) in RateLimit-Policy.
type rater interface{ Rate() Rate }

// statser is implemented by the in-memory limiters, whose Stats count the
// live limits their store had to evict.
type statser interface{ Stats() Stats }

// NewPolicySelector returns a selector over policies, tried in order. Each
// needs a valid, unique Name, a Limiter and a non-nil Key, and its own
// Limiter: two policies sharing one (alone or inside a Composite made
// with All) would count their keys together, so that a user named
// "198.51.100.10" spends the quota of that address. Only a SharedLimiter,
// which ignores keys, may be shared. The error wraps ErrInvalidOption
// otherwise.
func NewPolicySelector(policies ...Policy) (*PolicySelector, error) {
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: no policies", ErrInvalidOption)
	}
	s := &PolicySelector{policies: make([]*policy, 0, len(policies))}
	seen := make(map[string]bool, len(policies))
	owners := limiterOwners{}
	for _, p := range policies {
		cp, err := newPolicy(p)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("policy %q: %w: the name is used twice", p.Name, ErrInvalidOption)
		}
		seen[p.Name] = true
		if err := owners.claim(p, ""); err != nil {
			return nil, err
		}
		s.policies = append(s.policies, cp)
	}
	return s, nil
}

func newPolicy(p Policy) (*policy, error) {
	if err := validPolicyName(p.Name); err != nil {
		return nil, err
	}
	if p.Limiter == nil {
		return nil, fmt.Errorf("policy %q: %w: no limiter", p.Name, ErrInvalidOption)
	}
	if p.Key == nil {
		return nil, fmt.Errorf("policy %q: %w: no key function (a key function constructor returns nil with its error: check it)", p.Name, ErrInvalidOption)
	}
	cp := &policy{Policy: p, quoted: quotedSFString(p.Name)}
	if r, ok := p.Limiter.(rater); ok && r.Rate().Validate() == nil {
		cp.rate = r.Rate()
	}
	cp.evictions.init(p.Limiter)
	return cp, nil
}

// policyField returns the RateLimit-Policy value for a quota of limit
// units, as a header value, and its window w in seconds (0 when unknown).
// The window is the time the limiter takes to refill limit units from
// empty: Period for a window, burst·Period/Limit for a token bucket.
func (p *policy) policyField(limit int) ([]string, int64) {
	if c := p.field.Load(); c != nil && c.limit == limit {
		return c.value[:], c.window
	}
	var window time.Duration
	if p.rate.Limit > 0 && limit > 0 {
		// limit·Period in 128 bits: a long period times a large quota
		// overflows int64. A window beyond int64 is left out.
		hi, lo := bits.Mul64(uint64(limit), uint64(p.rate.Period))
		if hi < uint64(p.rate.Limit) {
			if q, _ := bits.Div64(hi, lo, uint64(p.rate.Limit)); q <= math.MaxInt64 {
				window = time.Duration(q)
			}
		}
	}
	c := &policyFieldCache{limit: limit, window: ceilSeconds(window)}
	c.value[0] = formatPolicyField(p.quoted, limit, c.window)
	p.field.Store(c)
	return c.value[:], c.window
}

// rateLimitField returns the RateLimit value for remaining units and t
// seconds, from the policy's table when a recent request had the same.
func (p *policy) rateLimitField(remaining int, t int64) []string {
	// Fibonacci hashing of the pair: remaining and t both vary in their
	// low bits, which the top bits of the product mix.
	h := (uint64(remaining)*31 + uint64(t)) * 0x9e3779b97f4a7c15
	slot := &p.rateLimit[h>>(64-rateLimitBits)]
	if v := slot.Load(); v != nil && v.remaining == remaining && v.t == t {
		return v.value[:]
	}
	v := &rateLimitValue{remaining: remaining, t: t}
	v.value[0] = formatRateLimit(p.quoted, remaining, t)
	slot.Store(v)
	return v.value[:]
}

// headers computes the quota headers of style for decision d: Retry-After
// if retry is set, and the policy's fields. costExceeded reports a
// request that can never succeed: only the policy is advertised then,
// since the Decision carries no real remaining quota. now is read only for
// the legacy reset timestamp.
//
// The values never lie, whatever the limiter reports: counts are clamped
// to what they can mean (Remaining within [0, Limit]), waits saturate
// instead of wrapping, and RateLimit's t is at most the policy's window
// w, so that no client reads a reset beyond the window the policy
// advertises (a sliding log's wait rounded up, or a sliding counter's
// estimate across two windows, can exceed it; Retry-After keeps the
// exact wait).
//
// The values returned are shared with other responses (header values are
// never written in place: Header.Set and Header.Add replace or reallocate
// them), so this allocates nothing once the values of the current second
// have been formatted.
func (p *policy) headers(style HeaderStyle, d Decision, retry, costExceeded bool, now func() time.Time) quotaHeaders {
	var q quotaHeaders
	limit := max(d.Limit, 0)
	remaining := min(max(d.Remaining, 0), limit)
	if retry {
		q.retryAfter = intHeader(RetryAfterSeconds(d.RetryAfter))
	}
	if style.ietf() {
		var window int64
		q.rateLimitPolicy, window = p.policyField(limit)
		if !costExceeded {
			// t: on a denial, when the request can be retried; otherwise
			// when the full quota is back.
			t := ceilSeconds(d.ResetAfter)
			if !d.Allowed {
				t = RetryAfterSeconds(d.RetryAfter)
			}
			if window > 0 && t > window {
				t = window
			}
			q.rateLimit = p.rateLimitField(remaining, t)
		}
	}
	if style.legacy() {
		q.limit = intHeader(int64(limit))
		if !costExceeded {
			q.remaining = intHeader(int64(remaining))
			// The full quota is back after ResetAfter, whether or not this
			// request was denied; rounded up to the second. Both terms are
			// below 2^34 for any real clock: the sum cannot wrap.
			q.reset = intHeader(now().Unix() + ceilSeconds(d.ResetAfter))
		}
	}
	return q
}

// intSlots is the size of the table of integer header values.
const intSlots = 256

type intValue struct {
	n     int64
	value [1]string
}

// intValues holds recently formatted integer header values (Retry-After,
// the legacy headers), one per slot: a denial of one second shares its
// Retry-After with the other denials of that second.
var intValues [intSlots]atomic.Pointer[intValue]

// intHeader returns n formatted as a header value.
func intHeader(n int64) []string {
	slot := &intValues[uint64(n)%intSlots]
	if v := slot.Load(); v != nil && v.n == n {
		return v.value[:]
	}
	v := &intValue{n: n}
	v.value[0] = strconv.FormatInt(n, 10)
	slot.Store(v)
	return v.value[:]
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
			return fmt.Errorf("policy %q: %w: only printable ASCII can be sent in RateLimit-Policy", name, ErrInvalidOption)
		}
	}
	return nil
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

// formatRateLimit formats the RateLimit value: quoted;r=remaining;t=seconds.
// It builds the value in a stack buffer so that the only allocation is the
// resulting string. 64 bytes hold a 20-character name with the largest
// numbers; a longer name spills to the heap, which is only slower.
func formatRateLimit(quoted string, remaining int, t int64) string {
	var buf [64]byte
	b := append(buf[:0], quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, t, 10)
	return string(b)
}

// liveEvictions samples a limiter's Stats at most once a second, from the
// request path (no goroutine of its own), and reports how many live
// limits were evicted since the previous sample.
type liveEvictions struct {
	stats func() Stats // nil: the limiter keeps no Stats
	next  atomic.Int64 // Unix ns before which no sample is taken
	seen  atomic.Uint64
}

func (e *liveEvictions) init(l Limiter) {
	if s, ok := l.(statser); ok {
		e.stats = s.Stats
		e.seen.Store(s.Stats().EvictedLive)
	}
}

// sample returns the growth of Stats().EvictedLive since the previous
// sample, if a second has passed since it (now in Unix ns); 0 otherwise.
// Of concurrent callers, one samples.
func (e *liveEvictions) sample(now int64) uint64 {
	next := e.next.Load()
	if e.stats == nil || now < next || !e.next.CompareAndSwap(next, now+int64(time.Second)) {
		return 0
	}
	cur := e.stats().EvictedLive
	if prev := e.seen.Swap(cur); cur > prev {
		return cur - prev
	}
	return 0
}

// Select returns the first policy that applies to r and the key r is
// counted under. If no policy yields a key the error wraps ErrNoKey; if a
// key function fails otherwise, its error is returned.
func (s *PolicySelector) Select(r *http.Request) (Policy, string, error) {
	p, key, err := s.selectPolicy(r)
	if err != nil {
		return Policy{}, "", err
	}
	return p.Policy, key, nil
}

// selectPolicy returns the policy that applies to r and r's key. On an
// error it returns the policy whose key function failed (for ErrNoKey,
// the last one tried), so that the error is reported under its name.
func (s *PolicySelector) selectPolicy(r *http.Request) (*policy, string, error) {
	var last error
	for _, p := range s.policies {
		key, err := p.Key(r)
		if err == nil {
			return p, key, nil
		}
		// A misconfigured key function stops the selection even if it
		// also says ErrNoKey: falling through to a weaker policy would
		// hide the mistake.
		if errors.Is(err, ErrInvalidOption) || !errors.Is(err, ErrNoKey) {
			return p, "", fmt.Errorf("policy %q: %w", p.Name, err)
		}
		last = err
	}
	p := s.policies[len(s.policies)-1]
	if len(s.policies) == 1 {
		return p, "", fmt.Errorf("policy %q: %w", p.Name, last)
	}
	return p, "", fmt.Errorf("policy %q: no policy applies (the last of %d tried): %w", p.Name, len(s.policies), last)
}

// AllowN selects the policy for r and asks its limiter for n units under
// the selected key, with r's context. It returns the name of the policy
// that decided along with the decision; errors are those of Select and of
// the limiter (ErrCostExceedsLimit among them).
func (s *PolicySelector) AllowN(r *http.Request, n int) (string, Decision, error) {
	p, key, err := s.selectPolicy(r)
	if err != nil {
		return "", Decision{}, err
	}
	d, err := p.Limiter.AllowN(r.Context(), key, n)
	return p.Name, d, err
}
