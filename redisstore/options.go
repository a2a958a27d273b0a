package redisstore

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Option configures a Redis limiter (NewTokenBucket, NewSlidingLog,
// NewSlidingCounter). As in the in-memory limiters, an option that does not
// apply to the limiter it is given to, or an option given twice, is an
// error wrapping floodgate.ErrInvalidOption, never silently ignored.
type Option func(*config) error

// Defaults.
const (
	// DefaultTimeout bounds each decision's round trip unless WithTimeout
	// says otherwise. A healthy Redis answers in well under a millisecond
	// on a LAN; 100 ms leaves room for a busy server and a GC pause while
	// keeping a dead one from stalling the requests it guards.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultProbeInterval is how long a limiter with a fallback answers
	// locally after a failed round trip before it tries Redis again,
	// unless WithProbeInterval says otherwise.
	DefaultProbeInterval = time.Second
	// DenyCacheMaxAge is the longest a denial cached by WithDenyCache
	// answers for a key, whatever its RetryAfter. It bounds how long a
	// client that another instance has reset or refunded can still be
	// denied from this instance's cache; a flood from one client then
	// costs one round trip per DenyCacheMaxAge at most, instead of one
	// per request.
	DenyCacheMaxAge = time.Second
)

type config struct {
	prefix        string
	burst         int
	burstSet      bool
	now           func() time.Time
	timeout       time.Duration
	fallback      floodgate.Limiter
	probeInterval time.Duration
	probeSet      bool
	denyCache     int
	countDenied   bool
	interval      bool
	maxKeyLen     int
	rateRefresh   time.Duration // 0: DefaultRateRefresh
	slotLease     time.Duration // in-flight limits: WithSlotLease
	debt          floodgate.DebtLimits
	given         map[string]bool // options seen, each allowed once
	// lease is WithLease's setting (lease.go).
	lease *Lease
}

// once records that option name was given, and refuses it the second
// time: two values for one setting are a mistake, not "the last one
// wins", as for the in-memory limiters and the middleware.
func (c *config) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("%w: %s given twice", floodgate.ErrInvalidOption, name)
	}
	c.given[name] = true
	return nil
}

const (
	kindTokenBucket = "token bucket"
	kindSlidingLog  = "sliding log"
	kindCounter     = "sliding counter"
	kindInFlight    = "in-flight limit"
)

func newConfig(kind string, opts []Option) (config, error) {
	c := config{
		prefix:        DefaultPrefix,
		timeout:       DefaultTimeout,
		probeInterval: DefaultProbeInterval,
		maxKeyLen:     floodgate.DefaultMaxKeyLength,
		slotLease:     DefaultSlotLease,
		debt:          floodgate.DefaultDebtLimits,
		given:         make(map[string]bool),
	}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", floodgate.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	switch {
	case c.burstSet && kind != kindTokenBucket:
		return c, fmt.Errorf("%w: WithBurst applies to a token bucket, not a %s", floodgate.ErrInvalidOption, kind)
	case c.interval && kind != kindTokenBucket:
		return c, fmt.Errorf("%w: WithIntervalRefill applies to a token bucket, not a %s", floodgate.ErrInvalidOption, kind)
	case c.countDenied && kind != kindSlidingLog:
		return c, fmt.Errorf("%w: WithCountDenied applies to a sliding log, not a %s", floodgate.ErrInvalidOption, kind)
	case c.countDenied && c.denyCache > 0:
		// A denial answered in process is not recorded in Redis, so a
		// persistent client would be released sooner than the log says.
		return c, fmt.Errorf("%w: WithDenyCache cannot be combined with WithCountDenied", floodgate.ErrInvalidOption)
	case c.lease != nil && kind == kindSlidingLog:
		// Why: see "Leased quota" in the package documentation.
		return c, fmt.Errorf("%w: WithLease applies to a token bucket or a sliding counter, not a %s", floodgate.ErrInvalidOption, kind)
	case c.lease != nil && c.interval:
		// A leased unit lasts until its GCRA slot begins; an interval
		// bucket hands a period's tokens out at once and has no slots.
		return c, fmt.Errorf("%w: WithLease needs the greedy refill, not WithIntervalRefill", floodgate.ErrInvalidOption)
	case c.probeSet && c.fallback == nil:
		return c, fmt.Errorf("%w: WithProbeInterval needs WithFallback", floodgate.ErrInvalidOption)
	case c.given["WithSlotLease"] && kind != kindInFlight:
		return c, fmt.Errorf("%w: WithSlotLease applies to an in-flight limit, not a %s", floodgate.ErrInvalidOption, kind)
	case c.given["WithMaxDebt"] && kind == kindInFlight:
		return c, fmt.Errorf("%w: WithMaxDebt applies to a limiter that charges beyond its quota, not an %s", floodgate.ErrInvalidOption, kind)
	case c.given["WithMaxDebt"] && c.lease != nil:
		return c, fmt.Errorf("%w: WithMaxDebt bounds what ChargeN charges, which leased quota (WithLease) does not", floodgate.ErrInvalidOption)
	case c.lease != nil && kind == kindInFlight:
		return c, fmt.Errorf("%w: WithLease (leased quota) does not apply to an in-flight limit, whose slots are leases of their own (WithSlotLease)", floodgate.ErrInvalidOption)
	}
	return c, nil
}

// WithPrefix sets the prefix of every Redis key the limiter writes
// (default DefaultPrefix). Limiters with different policies need different
// prefixes; see the key layout in the package documentation. Two limiters
// of one algorithm with one prefix write the same keys, whatever their
// rates: floodgate.NewPolicySelector, NewSelectorFor, NewRoutes and All
// refuse them together (see TokenBucket.Namespace), but two such limiters
// used side by side in business code, or in two services on one Redis,
// still count together. The prefix must not contain '{' or '}'.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if err := checkPrefix(p); err != nil {
			return err
		}
		c.prefix = p
		return c.once("WithPrefix")
	}
}

// WithBurst sets the capacity of a token bucket (default Rate.Limit), as
// floodgate.WithBurst does in memory. It applies only to NewTokenBucket.
func WithBurst(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > maxLimit {
			return fmt.Errorf("%w: burst %d must be in 1..%d", floodgate.ErrInvalidOption, n, maxLimit)
		}
		c.burst, c.burstSet = n, true
		return c.once("WithBurst")
	}
}

// WithIntervalRefill makes a token bucket refill intervally, as
// floodgate.WithIntervalRefill does in memory, with the same decisions:
// instead of a token every Period/Limit, the whole Rate.Limit comes back
// at once when a Period has passed, periods counted per key from its
// first event after its bucket was last full. The trade-off is the
// boundary double burst: up to burst + Rate.Limit events within a moment,
// across a period's end; prefer the greedy default or a SlidingLog where
// that matters. Its state has a key of its own (p:{k}:tbi), so a bucket
// never reads the other mode's state. It applies only to NewTokenBucket.
func WithIntervalRefill() Option {
	return func(c *config) error {
		c.interval = true
		return c.once("WithIntervalRefill")
	}
}

// WithClock makes the limiter send the time, read from now, with each
// decision instead of letting the script read the server's TIME. It exists
// for tests (the floodgatetest conformance suite walks a fake timeline) and
// simulations. In production keep the default: one clock, the server's,
// serves every instance, so a skewed application clock cannot corrupt a
// limit. Times are truncated to whole microseconds (the resolution of the
// Redis state) and, as in memory, a step backwards is held at the latest
// time this limiter has seen. Since Redis expires keys by its own clock,
// keys written on a client clock are kept for at least 10 s of real time,
// so that a test holding its clock still does not lose state.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", floodgate.ErrInvalidOption)
		}
		c.now = now
		return c.once("WithClock")
	}
}

// WithTimeout bounds each decision's round trip to Redis (default
// DefaultTimeout); a shorter deadline on the caller's context wins. A
// caller's context that can never end (context.Background) is bounded
// without a timer of its own, by a deadline rounded down to a fiftieth of
// d: its round trip ends after between 98 % and 100 % of d. With
// go-redis the client must have ContextTimeoutEnabled set, or it bounds
// network reads by its own ReadTimeout instead (see goredisstore).
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %s must be positive", floodgate.ErrInvalidOption, d)
		}
		c.timeout = d
		return c.once("WithTimeout")
	}
}

// WithFallback makes the limiter answer with l, a local limiter (usually an
// in-memory floodgate limiter), while Redis cannot be reached, instead of
// returning the error. After a failed round trip every decision goes to l
// for the probe interval (WithProbeInterval); then one decision tries Redis
// again, and on success the limiter is back on Redis.
//
// l's limit is per instance: with k instances behind a balancer, clients
// get up to k times l's quota during an outage, and what they consumed in l
// is not carried over to Redis (nor back). Size l accordingly, e.g. the
// Redis rate divided by the instance count. Give each Redis limiter a
// fallback of its own: one fallback behind two policies' limiters counts
// both policies' keys together during an outage, and nothing can check it.
func WithFallback(l floodgate.Limiter) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil fallback limiter", floodgate.ErrInvalidOption)
		}
		c.fallback = l
		return c.once("WithFallback")
	}
}

// WithProbeInterval sets how long decisions stay on the fallback after a
// failed round trip before Redis is tried again (default
// DefaultProbeInterval). It needs WithFallback.
func WithProbeInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: probe interval %s must be positive", floodgate.ErrInvalidOption, d)
		}
		c.probeInterval, c.probeSet = d, true
		return c.once("WithProbeInterval")
	}
}

// WithDenyCache keeps, in process, up to maxKeys keys that Redis denied,
// each until its RetryAfter has passed or for DenyCacheMaxAge, whichever
// comes first, and answers them without a round trip meanwhile. Under a
// flood from one client this turns thousands of Redis calls into one per
// DenyCacheMaxAge. The allow/deny answer is the one Redis would give (see
// the package documentation for why), except after a Reset or a refund on
// another instance, which this one cannot see: it may deny such a client
// for up to DenyCacheMaxAge after. Its own Reset and refunds clear its
// entry by the time they return, also of a denial whose round trip raced
// them (made before the undo ran, answered after), and a change of rate
// (SetRate on any instance) every entry made before it, by the time
// SetRate returns. A cached answer's
// RetryAfter is what is left of its entry's age, at most DenyCacheMaxAge:
// after that the cache asks Redis again, and only Redis knows the true
// wait. Remaining and ResetAfter are those of the cached denial, aged by
// the time passed.
//
// It cannot be combined with WithCountDenied, which must see every denied
// attempt.
func WithDenyCache(maxKeys int) Option {
	return func(c *config) error {
		if maxKeys <= 0 {
			return fmt.Errorf("%w: deny cache size %d must be positive", floodgate.ErrInvalidOption, maxKeys)
		}
		c.denyCache = maxKeys
		return c.once("WithDenyCache")
	}
}

// WithCountDenied makes a sliding log record denied attempts too, as
// floodgate.WithCountDenied does in memory: a client that keeps trying
// stays blocked, and the RetryAfter reported accounts for the denied
// attempt itself. The log still holds at most Rate.Limit events per key,
// the oldest dropped first. It applies only to NewSlidingLog.
func WithCountDenied() Option {
	return func(c *config) error {
		c.countDenied = true
		return c.once("WithCountDenied")
	}
}

// WithMaxDebt bounds how much one key can owe when charged beyond its
// quota (ChargeN, for floodgate.WithCostAfter), per call and in all, as
// floodgate.WithMaxDebt does in memory, with the same arithmetic and
// decisions (default floodgate.DefaultDebtLimits: an hour per call, a
// day in all, neither below the burst's refill or one window). Above
// them a charge saturates and ChargeN returns an error wrapping
// floodgate.ErrDebtCapped. Both limits must be positive, at most
// floodgate.MaxDebtLimit, and PerCall at most Total. It applies to
// NewTokenBucket, NewSlidingLog and NewSlidingCounter, not with
// WithLease.
func WithMaxDebt(l floodgate.DebtLimits) Option {
	return func(c *config) error {
		switch {
		case l.PerCall <= 0 || l.Total <= 0 || l.PerCall > floodgate.MaxDebtLimit || l.Total > floodgate.MaxDebtLimit:
			return fmt.Errorf("%w: WithMaxDebt: PerCall %s and Total %s must be in (0, %s]", floodgate.ErrInvalidOption, l.PerCall, l.Total, floodgate.MaxDebtLimit)
		case l.PerCall > l.Total:
			return fmt.Errorf("%w: WithMaxDebt: PerCall %s is above Total %s", floodgate.ErrInvalidOption, l.PerCall, l.Total)
		}
		c.debt = l
		return c.once("WithMaxDebt")
	}
}

// WithMaxKeyLength sets the longest client key, in bytes, the limiter
// accepts (default floodgate.DefaultMaxKeyLength); longer keys get
// floodgate.ErrKeyTooLong.
func WithMaxKeyLength(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: max key length %d must be positive", floodgate.ErrInvalidOption, n)
		}
		c.maxKeyLen = n
		return c.once("WithMaxKeyLength")
	}
}
