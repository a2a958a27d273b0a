package floodgate

import (
	"fmt"
	"reflect"
)

// Two limiters are one when they keep their per-key state in one place:
// All refuses such a pair (distinctLimits), and policies of different
// names may not share one (policyshare.go). Limiters that keep their
// state outside their Go value (Redis limiters) report where with
// Namespacer (namespace.go): two such values that report one namespace
// count as one limiter here.

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
