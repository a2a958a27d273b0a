package floodgate

import "net/http"

// Policy is a named limit: a Limiter and the KeyFunc that picks the key it
// counts a request under. The name identifies the policy to clients in the
// RateLimit-Policy and RateLimit headers, so it should be stable and must
// be printable ASCII.
//
// Policy is the net/http form of PolicyFor: its key function reads an
// *http.Request.
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
// (NewPolicyMiddleware). It is SelectorFor over *http.Request. A
// PolicySelector is safe for concurrent use.
type PolicySelector struct {
	sel *SelectorFor[*http.Request]
}

// NewPolicySelector returns a selector over policies, tried in order. Each
// needs a valid, unique Name, a Limiter and a non-nil Key, and its own
// Limiter: two policies sharing one (alone or inside a Composite made
// with All) would count their keys together, so that a user named
// "198.51.100.10" spends the quota of that address. Two limiters that
// report the same Namespace (Namespacer: two Redis limiters with one key
// prefix) count as one. Only a SharedLimiter, which ignores keys, may be
// shared. The error wraps ErrInvalidOption otherwise.
func NewPolicySelector(policies ...Policy) (*PolicySelector, error) {
	generic := make([]PolicyFor[*http.Request], len(policies))
	for i, p := range policies {
		generic[i] = PolicyFor[*http.Request]{Name: p.Name, Limiter: p.Limiter, Key: p.Key}
	}
	sel, err := NewSelectorFor(generic...)
	if err != nil {
		return nil, err
	}
	return &PolicySelector{sel: sel}, nil
}

// Select returns the first policy that applies to r and the key r is
// counted under. If no policy yields a key the error wraps ErrNoKey; if a
// key function fails otherwise, its error is returned.
func (s *PolicySelector) Select(r *http.Request) (Policy, string, error) {
	i, key, err := s.sel.pick(r)
	if err != nil {
		return Policy{}, "", err
	}
	p := s.sel.policies[i]
	return Policy{Name: p.Name, Limiter: p.Limiter, Key: s.sel.keys[i]}, key, nil
}

// AllowN selects the policy for r and asks its limiter for n units under
// the selected key, with r's context. It returns the name of the policy
// that decided along with the decision; errors are those of Select and of
// the limiter (ErrCostExceedsLimit among them).
func (s *PolicySelector) AllowN(r *http.Request, n int) (string, Decision, error) {
	i, key, err := s.sel.pick(r)
	if err != nil {
		return "", Decision{}, err
	}
	p := s.sel.policies[i]
	d, err := p.Limiter.AllowN(r.Context(), key, n)
	return p.Name, d, err
}
