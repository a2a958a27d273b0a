package floodgate

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/internal/inherit"
)

// Inherit says what a change of rate does to the units each key has
// already used: a limiter that takes a new rate while serving (SetRate)
// converts every key's state as it stands at the change, and from then
// on decides under the new rate. The capacity is a token bucket's burst
// and a window's Limit.
//
// The default, KeepUsed, is the one that neither forgives nor punishes:
// what a client spent stays spent, measured against the new quota. An
// upgrade gives a limited client exactly the difference, a downgrade
// never frees one (a client that spent more than the new capacity waits
// until its spending has refilled, or aged out, under the new rate), and
// two changes that undo each other change nothing. It is also the only
// one under which a window limiter keeps its events exactly as they
// happened. The others are for policies that mean something else by a
// change: ScaleUsed keeps each client's share of its quota, AddDifference
// keeps what each client has left on a downgrade, and StartFresh gives
// everyone the new quota at once.
//
// Against Bucket4j's TokensInheritanceStrategy (the strategies of its
// replaceConfiguration), which say what a bucket's available tokens a
// become under a new capacity: ScaleUsed is its PROPORTIONALLY (a·c′/c),
// AddDifference its ADDITIVE (min(a, c′) + max(c′ − c, 0)) and
// StartFresh its RESET (a new, full bucket). KeepUsed is none of them:
// it is ADDITIVE on an upgrade, and on a downgrade takes the difference
// away (a − (c − c′), which may leave the key owing) where ADDITIVE keeps
// a up to c′. Bucket4j's AS_IS (min(a, c′): the tokens left, as they are)
// has no equivalent here: it forgives on a downgrade as AddDifference
// does, and holds an upgrade back from every key until it refills; it
// would be a fifth conversion in each algorithm, in the Redis scripts and
// in the reference models, for no policy the four do not serve.
type Inherit int

const (
	// KeepUsed keeps the units each key has used as they are: a key that
	// used u of capacity c has c' − u left under capacity c' (none, and a
	// longer wait, when u > c'). A window keeps its events with their
	// times, counted under the new Limit and Period from the change on.
	// This is the default.
	KeepUsed Inherit = iota
	// ScaleUsed scales the units used by c'/c, as Bucket4j's
	// PROPORTIONALLY scales the tokens left: a key that used half of its
	// quota has used half of the new one. A token bucket scales exactly
	// (to a billionth of a token), a window rounds up to whole units,
	// taken from its oldest events on the way down and added to its
	// newest on the way up, so that no event counts for less, or for
	// less long, than its share.
	// A key that owed more than its capacity (after a KeepUsed downgrade)
	// is scaled up to what it owes at most.
	ScaleUsed
	// AddDifference keeps the units used on an upgrade, as KeepUsed does,
	// and keeps the units left on a downgrade, up to the new capacity
	// (Bucket4j's ADDITIVE): a key with a left of capacity c has
	// min(a, c') + max(c' − c, 0) left. A downgrade forgives each key the
	// difference it used, so a client that can switch its own plan back
	// and forth gains it each time: NewPlanLimiter refuses it.
	AddDifference
	// StartFresh forgets what each key used (Bucket4j's RESET): every key
	// starts with the full new quota, limited clients included, and the
	// debts of evicted keys are forgotten too. NewPlanLimiter refuses it:
	// a client that can change its own plan would reset its limit at will.
	StartFresh
)

// String names the strategy as in the documentation, "KeepUsed".
func (how Inherit) String() string {
	switch how {
	case KeepUsed:
		return "KeepUsed"
	case ScaleUsed:
		return "ScaleUsed"
	case AddDifference:
		return "AddDifference"
	case StartFresh:
		return "StartFresh"
	}
	return fmt.Sprintf("Inherit(%d)", int(how))
}

// check refuses a strategy that is none of the four.
func (how Inherit) check() error {
	if how < KeepUsed || how > StartFresh {
		return fmt.Errorf("%w: unknown inheritance strategy %d", ErrInvalidOption, int(how))
	}
	return nil
}

// units returns the units a key that has used u of capacity c keeps
// under capacity c2, rounded up (see inherit.Strategy.Units).
func (how Inherit) units(u, c, c2 uint64) uint64 { return inherit.Strategy(how).Units(u, c, c2) }

// RateChange is a new rate for a limiter that is serving (SetRate).
type RateChange struct {
	// Rate is the new rate, valid as for the limiter's constructor.
	Rate Rate
	// Burst is a token bucket's new capacity, in 1..2^24; 0 means
	// Rate.Limit, as in the constructor (WithBurst). A window limiter
	// has no burst: a non-zero Burst is refused.
	Burst int
	// Inherit says what each key keeps of what it used (default
	// KeepUsed).
	Inherit Inherit
}

// RateSetter is implemented by limiters that take a new rate while
// serving: the in-memory TokenBucket, SlidingLog and SlidingCounter, and
// the Redis limiters of the redisstore module. After SetRate returns,
// every decision is made under the new rate, each key's state converted
// as c.Inherit says, and the Decision reports the new quota. An invalid
// change is refused before anything is touched; in memory no other call
// fails. On Redis a write whose reply is lost leaves the outcome unknown
// until the call is repeated (redisstore's ErrRateUnconfirmed). An
// in-memory limiter ignores ctx.
type RateSetter interface {
	SetRate(ctx context.Context, c RateChange) error
}

// burstOf returns the capacity c asks of a token bucket, after checking
// c: Burst 0 means Rate.Limit.
func (c RateChange) burstOf() (int, error) {
	if err := c.Inherit.check(); err != nil {
		return 0, err
	}
	if c.Burst == 0 {
		return c.Rate.Limit, nil
	}
	if c.Burst < 0 || c.Burst > maxLimit {
		return 0, fmt.Errorf("%w: burst %d must be in 1..%d", ErrInvalidOption, c.Burst, maxLimit)
	}
	return c.Burst, nil
}

// checkWindow checks c for a window limiter, which has no burst.
func (c RateChange) checkWindow() error {
	if err := c.Inherit.check(); err != nil {
		return err
	}
	if c.Burst != 0 {
		return fmt.Errorf("%w: burst %d: a window limiter has no burst, its capacity is Rate.Limit", ErrInvalidOption, c.Burst)
	}
	return validateWindowRate(c.Rate)
}
