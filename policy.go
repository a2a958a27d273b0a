package floodgate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// PolicyFor is a named limit for a transport whose calls are of type C:
// what Policy is to net/http, with a key function that reads the
// transport's own call (a gRPC adapter's keys read the peer and the
// metadata, say). See Policy for the fields.
type PolicyFor[C any] struct {
	// Name is sent with the quota values; printable ASCII.
	Name string
	// Limiter decides for the key.
	Limiter Limiter
	// Key returns the key of a call, or an error wrapping ErrNoKey when
	// this policy does not apply to it.
	Key func(C) (string, error)
}

// SelectorFor is PolicySelector for a transport whose calls are of type
// C: an ordered list of policies, of which the first whose key function
// yields a key applies, with the same rules (ErrNoKey passes the call on,
// any other error stops the selection). Its Call method hands the result
// to the admission core (Gate). A SelectorFor is safe for concurrent use.
type SelectorFor[C any] struct {
	policies []*policy
	keys     []func(C) (string, error)
}

// NewSelectorFor returns a selector over policies, tried in order, with
// the rules of NewPolicySelector: each needs a valid, unique Name, a Key
// and a Limiter of its own, in a Namespace of its own (a SharedLimiter
// aside); the error wraps ErrInvalidOption otherwise.
func NewSelectorFor[C any](policies ...PolicyFor[C]) (*SelectorFor[C], error) {
	if len(policies) == 0 {
		return nil, fmt.Errorf("%w: no policies", ErrInvalidOption)
	}
	s := &SelectorFor[C]{policies: make([]*policy, 0, len(policies)), keys: make([]func(C) (string, error), 0, len(policies))}
	seen := make(map[string]bool, len(policies))
	owners := limiterOwners{}
	for _, p := range policies {
		cp, err := newPolicy(p.Name, p.Limiter, p.Key != nil)
		if err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("policy %q: %w: the name is used twice", p.Name, ErrInvalidOption)
		}
		seen[p.Name] = true
		if err := owners.claim(p.Name, p.Limiter, ""); err != nil {
			return nil, err
		}
		s.policies = append(s.policies, cp)
		s.keys = append(s.keys, p.Key)
	}
	return s, nil
}

// Call keys c: it returns the Call for Gate.Admit with the first policy
// that applies and its key, or, when none does, with the policy whose key
// function failed (for ErrNoKey, the last one tried) and the error, so
// that the error is reported under its name. The adapter adds the cost
// (unless the gate's applies) and where the call goes.
func (s *SelectorFor[C]) Call(c C) Call {
	i, key, err := s.pick(c)
	return Call{Key: key, Err: err, policy: s.policies[i]}
}

// pick returns the index of the policy that applies to c and c's key, or
// the index of the policy to report an error under.
func (s *SelectorFor[C]) pick(c C) (int, string, error) {
	var last error
	for i, key := range s.keys {
		k, err := key(c)
		if err == nil {
			return i, k, nil
		}
		// A misconfigured key function stops the selection even if it
		// also says ErrNoKey: falling through to a weaker policy would
		// hide the mistake.
		if errors.Is(err, ErrInvalidOption) || !errors.Is(err, ErrNoKey) {
			return i, "", fmt.Errorf("policy %q: %w", s.policies[i].Name, err)
		}
		last = err
	}
	i := len(s.policies) - 1
	if len(s.policies) == 1 {
		return i, "", fmt.Errorf("policy %q: %w", s.policies[i].Name, last)
	}
	return i, "", fmt.Errorf("policy %q: no policy applies (the last of %d tried): %w", s.policies[i].Name, len(s.policies), last)
}

// JoinKeysFor is JoinKeys for the key functions of a transport whose
// calls are of type C (a gRPC or connect adapter's): the key combines the
// keys of fns, in order, each written as its length in decimal, a colon
// and the component, so that no component can forge a boundary. The first
// component error is returned, wrapped. No functions, or a nil one, is an
// error wrapping ErrInvalidOption.
func JoinKeysFor[C any](fns ...func(C) (string, error)) (func(C) (string, error), error) {
	if len(fns) == 0 {
		return nil, fmt.Errorf("%w: JoinKeys: no key functions: pass the key functions whose keys to combine", ErrInvalidOption)
	}
	for i, fn := range fns {
		if fn == nil {
			return nil, fmt.Errorf("%w: JoinKeys: key function %d is nil: check the error of the constructor that built it", ErrInvalidOption, i)
		}
	}
	fns = slices.Clone(fns)
	return func(c C) (string, error) {
		var buf [128]byte // most joined keys fit: the result is the only allocation
		b := buf[:0]
		for i, fn := range fns {
			k, err := fn(c)
			if err != nil {
				return "", fmt.Errorf("JoinKeys component %d: %w", i, err)
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}, nil
}

// policy is a validated policy as the admission core knows it, whatever
// the transport: its name and limiter, its quota values' parts ready to
// be written, and its limiter's optional interfaces.
type policy struct {
	Name    string
	Limiter Limiter
	quoted  string // Name as an sf-string
	// rater and keyRater report the limiter's rate (nil: it reports
	// none), read at each decision: a rate changed while serving
	// (SetRate) or a key's own plan (PlanLimiter) shows in the window.
	rater    rater
	keyRater keyRater
	// field remembers the RateLimit-Policy values of recent quotas.
	field [policyFieldSlots]atomic.Pointer[policyFieldCache]
	// rateLimit remembers the RateLimit values of recent (remaining, t)
	// pairs, so that the requests of one second share one string. A
	// fixed table: values an attacker chooses only cause misses.
	rateLimit [rateLimitSlots]atomic.Pointer[headerValue]
	// evictions samples the limiter's Stats, if it has them.
	evictions liveEvictions
	// holds: the limiter holds slots (Releaser) that a call releases
	// when it settles.
	holds bool
}

// decide is p.Limiter.AllowN(ctx, key, n) with the Decision written into
// d. The in-memory limiters' AllowN is their allowN writing a zero
// Decision; called here, it writes the Decision where the caller keeps
// it, field by field, instead of returning it to be copied: the copy
// reads in 16-byte words what was just written in smaller ones, which
// the processor cannot forward from its store buffer and waits for (a
// few nanoseconds on every request). The types are matched exactly: a
// type that embeds one has an AllowN of its own, which must run. They
// are named, not reached through an interface, so that d is seen not to
// escape.
func (p *policy) decide(ctx context.Context, d *Decision, key string, n int) (err error) {
	switch l := p.Limiter.(type) {
	case *TokenBucket:
		*d = Decision{}
		return l.allowN(d, key, n)
	case *SlidingLog:
		*d = Decision{}
		return l.allowN(d, key, n)
	case *SlidingCounter:
		*d = Decision{}
		return l.allowN(d, key, n)
	}
	*d, err = p.Limiter.AllowN(ctx, key, n)
	return err
}

// rater is implemented by limiters that report their rate; the middleware
// then advertises the window (w) in RateLimit-Policy.
type rater interface{ Rate() Rate }

// keyRater is implemented by limiters whose rate is the key's own
// (PlanLimiter): rateOf reports the rate key was last decided under.
type keyRater interface {
	rateOf(key string) (Rate, bool)
}

// rateOf returns the rate key's decision was made under, for the window
// of its headers; the zero Rate when the limiter reports none.
func (p *policy) rateOf(key string) Rate {
	var r Rate
	switch {
	case p.keyRater != nil:
		r, _ = p.keyRater.rateOf(key)
	case p.rater != nil:
		r = p.rater.Rate()
	}
	if r.Limit <= 0 || r.Period <= 0 {
		return Rate{}
	}
	return r
}

// statser is implemented by the in-memory limiters, whose Stats count the
// live limits their store had to evict.
type statser interface{ Stats() Stats }

// checkPolicy refuses a policy without a valid name, a limiter or a key
// function.
func checkPolicy(name string, l Limiter, hasKey bool) error {
	if err := validPolicyName(name); err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("policy %q: %w: no limiter", name, ErrInvalidOption)
	}
	if !hasKey {
		return fmt.Errorf("policy %q: %w: no key function (a key function constructor returns nil with its error: check it)", name, ErrInvalidOption)
	}
	return nil
}

func newPolicy(name string, l Limiter, hasKey bool) (*policy, error) {
	if err := checkPolicy(name, l, hasKey); err != nil {
		return nil, err
	}
	cp := &policy{Name: name, Limiter: l, quoted: quotedSFString(name)}
	cp.keyRater, _ = l.(keyRater)
	cp.rater, _ = l.(rater)
	cp.evictions.init(l)
	cp.holds = holdsSlots(l)
	return cp, nil
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

// liveEvictions samples a limiter's Stats at most once a second, from the
// request path (no goroutine of its own), and reports how many live
// limits were evicted, and how many debts the debt memory could not keep
// apart, since the previous sample.
type liveEvictions struct {
	stats func() Stats // nil: the limiter keeps no Stats
	next  atomic.Int64 // Unix ns before which no sample is taken
	seen  atomic.Uint64
	lost  atomic.Uint64 // Merged + Forgotten at the previous sample
}

// evictionSample is what one sample of a store's Stats found: the growth
// of EvictedLive and of Merged + Forgotten.
type evictionSample struct {
	evicted, lost uint64
}

func (e *liveEvictions) init(l Limiter) {
	if s, ok := l.(statser); ok {
		e.stats = s.Stats
		st := s.Stats()
		e.seen.Store(st.EvictedLive)
		e.lost.Store(st.Merged + st.Forgotten)
	}
}

// sample returns the growth of Stats().EvictedLive and of the debts lost
// (Merged + Forgotten) since the previous sample, if a second has passed
// since it (now in Unix ns); zero otherwise. Of concurrent callers, one
// samples.
func (e *liveEvictions) sample(now int64) evictionSample {
	next := e.next.Load()
	if e.stats == nil || now < next || !e.next.CompareAndSwap(next, now+int64(time.Second)) {
		return evictionSample{}
	}
	st := e.stats()
	return evictionSample{evicted: growth(&e.seen, st.EvictedLive), lost: growth(&e.lost, st.Merged+st.Forgotten)}
}

// growth stores cur in seen and returns how much it grew.
func growth(seen *atomic.Uint64, cur uint64) uint64 {
	if prev := seen.Swap(cur); cur > prev {
		return cur - prev
	}
	return 0
}
