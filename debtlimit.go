package floodgate

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/internal/debtcap"
)

// DebtLimits bounds how much one key can owe when it is charged beyond its
// quota (Charger, for WithCostAfter), as the time the key's refill takes
// to pay it: a key in debt is allowed again within about that long, so a
// single huge cost, or a run of them, cannot lock a client out for months.
// "About": the bounds are on what is owed beyond the quota, so the wait
// may exceed them by about the quota's own refill (a bucket's burst, a
// window's Period). On 10 a minute with Total 10 minutes, 80 charges of
// 5 wait 11m0s on a token bucket, 10m6s on a sliding log and 11m6s on a
// sliding counter (TestConcurrentChargesAddUp logs them).
// A limiter takes them with WithMaxDebt; DefaultDebtLimits applies
// otherwise.
//
// Neither bound is ever below what the limit itself promises: a token
// bucket always carries a debt of its whole burst's refill, a window
// limiter one whole Period — a charge no larger than the quota is never
// forgiven, whatever the limits say. Above a bound the charge saturates:
// what fits is charged, the rest is forgiven, and ChargeN returns an
// error wrapping ErrDebtCapped (the admission core reports it in the
// call's AfterHandler DecisionEvent, DebtCapped, and logs the first one).
type DebtLimits struct {
	// PerCall bounds what one charge (one call's real cost beyond its
	// estimate) adds to a key's debt. DefaultDebtLimits has an hour: an
	// honest client whose estimate was wildly wrong once waits an hour at
	// most.
	PerCall time.Duration
	// Total bounds what a key owes in all, however many charges come
	// (the calls in flight when its quota ran out). DefaultDebtLimits has
	// 24 hours: a client whose every call costs far more than it
	// announces pays a day for each burst it gets in. It must not be
	// below PerCall.
	Total time.Duration
}

// DefaultDebtLimits are the debt limits of a limiter built without
// WithMaxDebt: an hour per call, a day in all (see DebtLimits for the
// reasons).
var DefaultDebtLimits = DebtLimits{PerCall: time.Hour, Total: 24 * time.Hour}

// MaxDebtLimit is the largest DebtLimits duration: 2^50 µs, about 35
// years, the longest a Redis limiter (redisstore) can hold too.
const MaxDebtLimit = (1 << 50) * time.Microsecond

// ErrDebtCapped is wrapped by the error of a ChargeN that charged less
// than it was asked, because the key's debt reached its limits (see
// DebtLimits): the units up to the bound were charged, the rest
// forgiven. It is not a failure of the limiter.
var ErrDebtCapped = errors.New("floodgate: the charge reached the key's debt limit; the excess was forgiven")

// WithMaxDebt bounds how much one key can owe, per call and in all (see
// DebtLimits; default DefaultDebtLimits). Both must be positive, at most
// MaxDebtLimit, and PerCall at most Total; the error wraps
// ErrInvalidOption otherwise. It applies to NewTokenBucket,
// NewSlidingLog and NewSlidingCounter.
func WithMaxDebt(l DebtLimits) Option {
	return func(c *config) error {
		if err := l.check(); err != nil {
			return err
		}
		c.debt, c.debtSet = l, true
		return c.once("WithMaxDebt")
	}
}

// check refuses debt limits no limiter can hold.
func (l DebtLimits) check() error {
	switch {
	case l.PerCall <= 0 || l.Total <= 0:
		return fmt.Errorf("%w: WithMaxDebt: PerCall %s and Total %s must be positive", ErrInvalidOption, l.PerCall, l.Total)
	case l.PerCall > MaxDebtLimit || l.Total > MaxDebtLimit:
		return fmt.Errorf("%w: WithMaxDebt: PerCall %s and Total %s must be at most %s", ErrInvalidOption, l.PerCall, l.Total, MaxDebtLimit)
	case l.PerCall > l.Total:
		return fmt.Errorf("%w: WithMaxDebt: PerCall %s is above Total %s: one call cannot owe more than a key may in all", ErrInvalidOption, l.PerCall, l.Total)
	}
	return nil
}

// debtCap is a limiter's debt limits in its rate's terms (see
// internal/debtcap, shared with redisstore).
type debtCap = debtcap.Cap

// newDebtCap returns l at rate r, with floor units (the capacity the
// limit promises: a bucket's burst, a window's Limit) as the least of
// both bounds.
func newDebtCap(l DebtLimits, r Rate, floor int) debtCap {
	return debtcap.New(l.PerCall, l.Total, r.Limit, r.Period, floor)
}
