package floodgate

import (
	"fmt"
	"reflect"
)

// One limiter counts every key it is given in one space. Two policies
// that hand it their keys mix them: a user named "198.51.100.10" under a
// "user" policy spends the quota of that address under an "ip" policy.
// Namespacing the keys per policy would avoid the collision but change
// the key the limiter stores, so that business code calling
// lim.Reset(ctx, "alice") after a login would reset nothing; the
// configuration is refused instead, where the mistake is made.
//
// Across the routes of a table, policies of one name may share a limiter:
// a budget per client IP over several routes is a common wish, and the
// name says the policies key requests the same way. Key functions cannot
// be compared, so that is the caller's word; policies of different names
// sharing a limiter are refused as within a selector.

// Limiters that keep their state outside their Go value (Redis limiters)
// report where with Namespacer (namespace.go): two such values that
// report one namespace count as one limiter here.

// limiterOwners records, for the state of each keyed limiter (see
// stateOf), the policy (and route) that counts under it.
type limiterOwners map[any]limiterOwner

type limiterOwner struct {
	policy, route string
}

// claim records that policy p of route counts under its limiter (and the
// limiters of a Composite), or returns an error if a policy of another
// name already does.
func (o limiterOwners) claim(p Policy, route string) error {
	var err error
	keyedLimiters(p.Limiter, func(l Limiter) {
		state := stateOf(l)
		prev, taken := o[state]
		switch {
		case !taken:
			o[state] = limiterOwner{p.Name, route}
		case prev.policy != p.Name && err == nil:
			where := ""
			if prev.route != route {
				where = fmt.Sprintf(" (route %q)", prev.route)
			}
			err = fmt.Errorf("policy %q: %w: its limiter %s, so the keys of the two could collide (a user named like a client IP would spend that address's quota); give each policy %s", p.Name, ErrInvalidOption, sharedWith(state, prev.policy, where), ownLimiter(state))
		}
	})
	return err
}

// keyedLimiters calls f with l and, if l is a Composite, with each of its
// limiters, except those that ignore the key (a SharedLimiter, one
// bucket for every key, can be shared freely) and those that cannot be
// told apart (values of a type that is not comparable and report no
// Namespace).
func keyedLimiters(l Limiter, f func(Limiter)) {
	switch l := l.(type) {
	case *SharedLimiter:
		return
	case *Composite:
		for _, inner := range l.limiters {
			keyedLimiters(inner, f)
		}
	}
	if distinguishable(l) {
		f(l)
	}
}

// distinguishable reports whether stateOf can identify l's state.
func distinguishable(l Limiter) bool {
	if _, ok := l.(Namespacer); ok {
		return true
	}
	return l != nil && reflect.TypeOf(l).Comparable()
}

// namespace is the state of a limiter that reports a Namespace.
type namespace string

// stateOf returns what identifies the per-key state of l: its Namespace
// if it reports one, else l itself.
func stateOf(l Limiter) any {
	if n, ok := l.(Namespacer); ok {
		return namespace(n.Namespace())
	}
	return l
}

// sharedWith says, for an error, how a limiter with this state shares it
// with the limiter of policy (of another route: where).
func sharedWith(state any, policy, where string) string {
	if ns, ok := state.(namespace); ok {
		return fmt.Sprintf("keeps its state where the limiter of policy %q%s does (%s)", policy, where, string(ns))
	}
	return fmt.Sprintf("also counts the keys of policy %q%s", policy, where)
}

// ownLimiter says, for an error, what to give each of two sharers.
func ownLimiter(state any) string {
	if _, ok := state.(namespace); ok {
		return "a limiter in a namespace of its own (for redisstore: its own WithPrefix)"
	}
	return "its own limiter"
}

// distinctLimits returns an error if two of the limiters given to All (or
// of the Composites among them) keep their state in one place: each
// request would then be counted twice in one state, by two limits' rules
// (All of 10 a minute and 100 an hour on one Redis key allowed 2 requests
// of 20 instead of 10). A SharedLimiter counts here too.
func distinctLimits(limiters []Limiter) error {
	seen := make(map[any]int, len(limiters))
	var err error
	for i, l := range limiters {
		eachLimiter(l, func(inner Limiter) {
			state := stateOf(inner)
			if j, dup := seen[state]; dup && err == nil {
				what := "are one limiter"
				if ns, ok := state.(namespace); ok {
					what = fmt.Sprintf("keep their state in one place (%s)", string(ns))
				}
				err = fmt.Errorf("%w: All: limiters %d and %d %s, so each request would be counted twice in one state, by two limits' rules; give each limit %s", ErrInvalidOption, j, i, what, ownLimiter(state))
			}
			seen[state] = i
		})
	}
	return err
}

// eachLimiter calls f with l and, if l is a Composite, with each of its
// limiters, those that can be told apart (see distinguishable) only.
func eachLimiter(l Limiter, f func(Limiter)) {
	if c, ok := l.(*Composite); ok {
		for _, inner := range c.limiters {
			eachLimiter(inner, f)
		}
	}
	if distinguishable(l) {
		f(l)
	}
}
