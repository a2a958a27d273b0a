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
	// Without an error, the usual case, the answer is decided here, in a
	// function small enough to be inlined into its callers.
	if err == nil {
		if allowed {
			return Allowed
		}
		return Denied
	}
	return errorOutcome(err)
}

// OutcomeOf is the outcome of a middleware decision: Classify's, except
// that a denial the middleware did not block (dry-run) is DryRunDenied.
// The hook calls it on every request: it takes the event by pointer, as
// the event is too large to copy for the three fields it reads.
func OutcomeOf(ev *floodgate.DecisionEvent) Outcome {
	o := Allowed
	switch {
	case ev.Err != nil:
		o = errorOutcome(ev.Err)
	case !ev.Decision.Allowed:
		o = Denied
	}
	if o == Denied && !ev.Blocked {
		return DryRunDenied
	}
	return o
}

// errorOutcome is the outcome of an answer with err.
func errorOutcome(err error) Outcome {
	if errors.Is(err, floodgate.ErrCostExceedsLimit) {
		return Denied
	}
	return Error
}
