package metricsbase

import (
	"context"
	"fmt"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
)

// TestOutcomeOf: every way a middleware decision ends, and the business
// code's Classify on the same answers.
func TestOutcomeOf(t *testing.T) {
	never := fmt.Errorf("cost 5 over 2: %w", floodgate.ErrCostExceedsLimit)
	canceled := fmt.Errorf("%w: %w", metricstest.ErrDown, context.Canceled)
	for _, tt := range []struct {
		name     string
		ev       floodgate.DecisionEvent
		want     Outcome
		classify Outcome
	}{
		{"allowed", floodgate.DecisionEvent{Decision: floodgate.Decision{Allowed: true}}, Allowed, Allowed},
		{"denied", floodgate.DecisionEvent{Blocked: true}, Denied, Denied},
		{"dry-run denied", floodgate.DecisionEvent{}, DryRunDenied, Denied},
		{"cost never fits", floodgate.DecisionEvent{Err: never, Blocked: true}, Denied, Denied},
		{"cost never fits, dry run", floodgate.DecisionEvent{Err: never}, DryRunDenied, Denied},
		{"store down", floodgate.DecisionEvent{Err: metricstest.ErrDown, Blocked: true}, Error, Error},
		{"store down, fail open", floodgate.DecisionEvent{Err: metricstest.ErrDown}, Error, Error},
		{"client gone", floodgate.DecisionEvent{Err: canceled, Blocked: true}, Error, Error},
		// An error with an allowance is still no decision.
		{"allowed with error", floodgate.DecisionEvent{Decision: floodgate.Decision{Allowed: true}, Err: metricstest.ErrDown}, Error, Error},
	} {
		if got := OutcomeOf(&tt.ev); got != tt.want {
			t.Errorf("%s: OutcomeOf = %d, want %d", tt.name, got, tt.want)
		}
		if got := Classify(tt.ev.Decision.Allowed, tt.ev.Err); got != tt.classify {
			t.Errorf("%s: Classify = %d, want %d", tt.name, got, tt.classify)
		}
	}
}
