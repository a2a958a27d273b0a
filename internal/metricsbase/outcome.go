package metricsbase

import (
	"errors"

	"github.com/floodgate-go/floodgate"
)

// Outcome is what became of a request at a rate limit. It indexes the
// adapters' per-policy counters and their label values.
type Outcome int

// The outcomes, in the order the adapters list them.
const (
	// Allowed: the limiter allowed the request.
	Allowed Outcome = iota
	// Denied: the limiter denied the request and it was refused (a cost
	// that can never fit, floodgate.ErrCostExceedsLimit, included).
	Denied
	// DryRunDenied: the limiter denied the request, but the middleware ran
	// in dry-run (floodgate.WithDryRun) and let it through.
	DryRunDenied
	// Error: no decision could be made; the error policy applied.
	Error
	// Skipped: a skip predicate exempted the request. Classify and
	// OutcomeOf never return it: it is counted where the predicate runs.
	Skipped
	// NumOutcomes is the number of outcomes, for arrays indexed by them.
	NumOutcomes
)

// Classify maps a limiter's answer to Allowed, Denied or Error: an error
// other than floodgate.ErrCostExceedsLimit is Error, since no decision was
// made; a cost that can never fit is a denial.
func Classify(allowed bool, err error) Outcome {
	switch {
	case err != nil && !errors.Is(err, floodgate.ErrCostExceedsLimit):
		return Error
	case allowed && err == nil:
		return Allowed
	default:
		return Denied
	}
}

// OutcomeOf is the outcome of a middleware decision: Classify's, except
// that a denial the middleware did not block (dry-run) is DryRunDenied.
func OutcomeOf(ev floodgate.DecisionEvent) Outcome {
	o := Classify(ev.Decision.Allowed, ev.Err)
	if o == Denied && !ev.Blocked {
		return DryRunDenied
	}
	return o
}
