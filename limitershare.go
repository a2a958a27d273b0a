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

// limiterOwners records, for each keyed limiter, the policy (and route)
// that counts under it.
type limiterOwners map[Limiter]limiterOwner

type limiterOwner struct {
	policy, route string
}

// claim records that policy p of route counts under its limiter (and the
// limiters of a Composite), or returns an error if a policy of another
// name already does.
func (o limiterOwners) claim(p Policy, route string) error {
	var err error
	keyedLimiters(p.Limiter, func(l Limiter) {
		prev, taken := o[l]
		switch {
		case !taken:
			o[l] = limiterOwner{p.Name, route}
		case prev.policy != p.Name && err == nil:
			where := ""
			if prev.route != route {
				where = fmt.Sprintf(" (route %q)", prev.route)
			}
			err = fmt.Errorf("policy %q: %w: its limiter also counts the keys of policy %q%s, so the keys of the two could collide (a user named like a client IP would spend that address's quota); give each policy its own limiter", p.Name, ErrInvalidOption, prev.policy, where)
		}
	})
	return err
}

// keyedLimiters calls f with l and, if l is a Composite, with each of its
// limiters, except those that ignore the key (a SharedLimiter, one
// bucket for every key, can be shared freely) and those that cannot be
// told apart (values of a type that is not comparable).
func keyedLimiters(l Limiter, f func(Limiter)) {
	switch l := l.(type) {
	case *SharedLimiter:
		return
	case *Composite:
		for _, inner := range l.limiters {
			keyedLimiters(inner, f)
		}
	}
	if l != nil && reflect.TypeOf(l).Comparable() {
		f(l)
	}
}
