package floodgate

import "fmt"

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

// limiterOwners records, for the state of each keyed limiter (see
// stateOf), the policy (and route) that counts under it.
type limiterOwners map[any]limiterOwner

type limiterOwner struct {
	policy, route string
}

// claim records that the policy named name, of route, counts under
// limiter lim (and the limiters of a Composite), or returns an error if a
// policy of another name already does.
func (o limiterOwners) claim(name string, lim Limiter, route string) error {
	var err error
	keyedLimiters(lim, func(l Limiter) {
		state := stateOf(l)
		prev, taken := o[state]
		switch {
		case !taken:
			o[state] = limiterOwner{name, route}
		case prev.policy != name && err == nil:
			where := ""
			if prev.route != route {
				where = fmt.Sprintf(" (route %q)", prev.route)
			}
			err = fmt.Errorf("policy %q: %w: its limiter %s, so the keys of the two could collide (a user named like a client IP would spend that address's quota); give each policy %s", name, ErrInvalidOption, sharedWith(state, prev.policy, where), ownLimiter(state))
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

// sharedWith says, for an error, how a limiter with this state shares it
// with the limiter of policy (of another route: where).
func sharedWith(state any, policy, where string) string {
	if ns, ok := state.(namespace); ok {
		return fmt.Sprintf("keeps its state where the limiter of policy %q%s does (%s)", policy, where, string(ns))
	}
	return fmt.Sprintf("also counts the keys of policy %q%s", policy, where)
}
