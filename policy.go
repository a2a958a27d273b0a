package floodgate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/http"
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
	// Limiter decides for the key.
	Limiter Limiter
	// Key returns the key of a request, or an error wrapping ErrNoKey when
	// this policy does not apply to it (the next policy is then tried).
	Key KeyFunc
}

// PolicySelector picks, for each request, the limit keyed by its most
// meaningful signal. It holds an ordered list of policies and selects the
// first whose key function yields a key: a key function that returns an
// error wrapping ErrNoKey passes the request on to the next policy; any
// other error stops the selection and is returned, so a broken key function
// never silently lets a request fall through to a weaker limit.
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

// policy is a validated Policy with its precomputed header parts.
type policy struct {
	Policy
	quoted string // Name as an sf-string
	rate   Rate   // the limiter's rate, if it reports one
	field  atomic.Pointer[policyFieldCache]
}

// policyFieldCache memoizes the RateLimit-Policy value for one quota, so the
// hot path formats it once rather than on every request.
type policyFieldCache struct {
	limit int
	value string
}

// rater is implemented by limiters that report their rate; the middleware
// then advertises the window (w) in RateLimit-Policy.
type rater interface{ Rate() Rate }

// NewPolicySelector returns a selector over policies, tried in order. Each
// needs a valid, unique Name, a Limiter and a Key that was not built from
// invalid arguments (see KeyFunc); the error wraps ErrInvalidOption
// otherwise.
func NewPolicySelector(policies ...Policy) (*PolicySelector, error) {
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: no policies", ErrInvalidOption)
	}
	s := &PolicySelector{policies: make([]*policy, 0, len(policies))}
	seen := make(map[string]bool, len(policies))
	for _, p := range policies {
		cp, err := newPolicy(p)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%w: policy name %q used twice", ErrInvalidOption, p.Name)
		}
		seen[p.Name] = true
		s.policies = append(s.policies, cp)
	}
	return s, nil
}

func newPolicy(p Policy) (*policy, error) {
	if err := validPolicyName(p.Name); err != nil {
		return nil, err
	}
	if p.Limiter == nil {
		return nil, fmt.Errorf("%w: policy %q has no limiter", ErrInvalidOption, p.Name)
	}
	if p.Key == nil {
		return nil, fmt.Errorf("%w: policy %q has no key function", ErrInvalidOption, p.Name)
	}
	if err := keyFuncError(p.Key); err != nil { // built from invalid arguments
		return nil, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	cp := &policy{Policy: p, quoted: quotedSFString(p.Name)}
	if r, ok := p.Limiter.(rater); ok && r.Rate().Validate() == nil {
		cp.rate = r.Rate()
	}
	return cp, nil
}

// policyValue returns the RateLimit-Policy value for a quota of limit
// units. The window is the time the limiter takes to refill limit units
// from empty: Period for a window, burst·Period/Limit for a token bucket.
func (p *policy) policyValue(limit int) string {
	if c := p.field.Load(); c != nil && c.limit == limit {
		return c.value
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
	v := policyField(p.quoted, limit, window)
	p.field.Store(&policyFieldCache{limit: limit, value: v})
	return v
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

func (s *PolicySelector) selectPolicy(r *http.Request) (*policy, string, error) {
	for _, p := range s.policies {
		key, err := p.Key(r)
		if err == nil {
			return p, key, nil
		}
		if !errors.Is(err, ErrNoKey) {
			return nil, "", fmt.Errorf("policy %q: %w", p.Name, err)
		}
	}
	return nil, "", fmt.Errorf("%w: no policy applies to the request", ErrNoKey)
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
