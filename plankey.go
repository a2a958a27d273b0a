package floodgate

import (
	"errors"
	"fmt"
	"net/http"
)

// KnownKey returns a key function that yields what key returns if its
// plan is known, and an error wrapping ErrNoKey if the resolver says it
// has none: in a PolicySelector, a request with an unknown API key then
// falls through to the next policy (by client IP, say) instead of getting
// a quota of its own for every key made up. A failed lookup, or one
// refused for capacity, is returned as such, wrapping ErrPlanLookup: a
// key function's own error, which no error policy lets through. The
// lookup is the cached one the decision then uses.
func (p *PlanLimiter) KnownKey(key KeyFunc) KeyFunc {
	if key == nil {
		return nil
	}
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return "", err
		}
		if _, err := p.PlanOf(r.Context(), k); err != nil {
			if errors.Is(err, ErrNoPlan) {
				return "", fmt.Errorf("%w: %w", ErrNoKey, err)
			}
			return "", err
		}
		return k, nil
	}
}
