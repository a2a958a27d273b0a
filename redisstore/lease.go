package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Lease configures leased quota, the opt-in mode of the token bucket and
// the sliding counter that WithLease turns on. A zero field takes its
// default.
//
// In this mode an instance that decides for a hot key takes a share of the
// key's quota from Redis in the round trip of one decision, charged in
// Redis at once, and allows the next requests for that key from the share,
// in memory, until it is spent or its time is up; then it takes another.
// A key that is not hot, whatever its traffic across instances, leases one
// unit at a time: its decisions are the plain limiter's round trips.
//
// Leases never let more through than one exact limiter would, whatever the
// number of instances: a unit is allowed locally only while Redis still
// counts it (see the package documentation, "Leased quota", for why). What
// they can cost is quota: a unit leased and never allowed, because its
// instance stopped, went idle or was evicted, is lost as if it had been
// used. MaxShare bounds that loss per lease. The sliding counter gives
// back the units its leases leave unused, to the window they were counted
// in, so it loses them only when an instance stops or a give-back fails,
// not once per window; and its leases never take a key's last half lease,
// so that a steady demand within the quota is never denied for units
// other instances hold.
type Lease struct {
	// MaxKeys bounds the client keys this limiter keeps lease state for
	// (default DefaultLeaseKeys), about that many in all (the bound holds
	// per shard): each costs about 360 bytes of heap, and a sliding
	// counter's key that leases on the server's clock about 800, with the
	// timer that gives its leases' unused units back. The
	// least recently used key is dropped first, and its unused units are
	// lost (charged in Redis, never allowed): a key spray costs quota, never
	// adds to it.
	MaxKeys int
	// Horizon is how long a lease should last at the key's local rate
	// (default DefaultLeaseHorizon): a lease is sized to the requests this
	// instance saw for the key in about that time. Longer means fewer round
	// trips for a hot key and more units left over when its traffic
	// stops. Keys with fewer than two requests per Horizon lease one unit.
	Horizon time.Duration
	// MaxShare sets the largest lease to 1/MaxShare of the key's capacity
	// (the bucket's burst, the counter's limit), at least one unit
	// (default DefaultLeaseShare). An instance holds of a key at most a
	// lease and the next one, taken when the first holds less than half:
	// 1.5 leases at any moment, which is the most its stopping costs the
	// key, once, and the most its leases keep from other instances'
	// requests meanwhile. A counter's lease leaves the key half a lease of
	// room, max(1, limit/(2·MaxShare)). A key whose capacity is below
	// 2·MaxShare never leases more than the unit it decides.
	MaxShare int
}

// Defaults of Lease.
const (
	DefaultLeaseKeys    = 10_000
	DefaultLeaseHorizon = 50 * time.Millisecond
	DefaultLeaseShare   = 16
)

// Bounds of Lease: beyond them a setting is a mistake, not a choice.
const (
	maxLeaseKeys    = 1 << 24
	maxLeaseHorizon = time.Hour
)

// WithLease turns on leased quota (see Lease) for a TokenBucket or a
// SlidingCounter; a SlidingLog refuses it. Every instance of a policy
// should run in the same mode: a plain limiter's RefundN or Reset on a key
// can give back units that a leasing instance still grants.
func WithLease(l Lease) Option {
	return func(c *config) error {
		// A copy for each limiter: one Option value may build several,
		// at once, and each fills in its own defaults.
		l := l
		switch {
		case l.MaxKeys < 0 || l.MaxKeys > maxLeaseKeys:
			return fmt.Errorf("%w: Lease.MaxKeys %d must be in 0..%d (0 for the default)", floodgate.ErrInvalidOption, l.MaxKeys, maxLeaseKeys)
		case l.Horizon < 0 || l.Horizon > maxLeaseHorizon:
			return fmt.Errorf("%w: Lease.Horizon %v must be in 0..%v (0 for the default)", floodgate.ErrInvalidOption, l.Horizon, maxLeaseHorizon)
		case l.MaxShare < 0 || l.MaxShare > maxLimit:
			return fmt.Errorf("%w: Lease.MaxShare %d must be in 0..%d (0 for the default)", floodgate.ErrInvalidOption, l.MaxShare, maxLimit)
		}
		if l.MaxKeys == 0 {
			l.MaxKeys = DefaultLeaseKeys
		}
		if l.Horizon == 0 {
			l.Horizon = DefaultLeaseHorizon
		}
		if l.MaxShare == 0 {
			l.MaxShare = DefaultLeaseShare
		}
		c.lease = &l
		return c.once("WithLease")
	}
}

// LeaseStats counts what leased quota did in one limiter (see
// TokenBucket.LeaseStats). Counts start at zero when the limiter is built
// and only grow, except Keys; MaxKeys is fixed. Without WithLease every
// field is zero.
//
// In units, while no RefundN was answered from a lease: LeasedUnits =
// LocalUnits + ReturnedUnits + StrandedUnits + ReturningUnits + the units
// held now.
type LeaseStats struct {
	// LocalDecisions counts the decisions allowed from a lease, without a
	// round trip; LocalUnits the units they allowed.
	LocalDecisions uint64
	LocalUnits     uint64
	// Leases counts the round trips that leased units beyond their own
	// decision; LeasedUnits counts those units. EarlyLeases counts the
	// leases of Leases taken ahead of need, by a caller whose own units
	// came from the lease before (so that the key's other callers do not
	// wait for a round trip).
	Leases      uint64
	LeasedUnits uint64
	EarlyLeases uint64
	// ReturnedUnits counts the leased units given back to Redis unused,
	// with the next lease of the same key.
	ReturnedUnits uint64
	// StrandedUnits counts the leased units neither allowed nor given
	// back: their time ran out (a bucket's slots, or a counter's window
	// and the one after it before the give-back reached Redis), their key
	// was evicted (Lease.MaxKeys) or reset, or Redis could not take them
	// back. Each cost the key one unit
	// of its quota, as if it had been used: this is the mode's
	// under-admission, as measured in this instance.
	StrandedUnits uint64
	// ReturningUnits is the sliding counter's leased units whose lease
	// ended unused, now, waiting to go back to the window they were
	// counted in: with the key's next round trip, or its timer (see the
	// package documentation, "Leased quota"). Like Keys, it is a level,
	// not a count.
	ReturningUnits int
	// LocalRefunds counts the units RefundN gave back to a lease of this
	// instance instead of to Redis.
	LocalRefunds uint64
	// AheadUnits counts the refill a token bucket skipped to place leases
	// ahead, so that their units last until the key's local rate spends
	// them (a key used below its rate): refill nobody was using. It keeps
	// the bucket at most min(Horizon·Limit/Period, burst/MaxShare) units
	// lower than it would be, whatever the number of instances, and
	// nothing is skipped once the key is used at its rate.
	AheadUnits uint64
	// Keys is the number of client keys with lease state now, and
	// MaxKeys their bound (Lease.MaxKeys, about that many in all); MaxKeys
	// is zero, and so tells, when the limiter does not lease.
	Keys, MaxKeys int
}

// leaseAlgo is what an algorithm gives the lease mode.
type leaseAlgo interface {
	// eval is the algorithm's plain decision.
	eval(ctx context.Context, key string, n int, now string) (floodgate.Decision, error)
	// leaseEval runs the lease script for c and fills its results.
	leaseEval(ctx context.Context, key string, c *leaseCall, now string) (floodgate.Decision, error)
	// granted is the Decision of an allowed request (or a report) at local
	// time now, from the state of e's lease with left units still held.
	granted(e leaseState, left int, now int64) floodgate.Decision
	// plan adjusts c for the algorithm, given the key's local rate in
	// units per nanosecond.
	plan(e *leaseEntry, c *leaseCall, rate float64)
	// refundLeased gives n units back to Redis, never below what leases
	// may still grant.
	refundLeased(ctx context.Context, key string, n int, now string) error
	// rate returns what leases depend on of the rate decided under, given
	// Lease.MaxShare.
	rate(maxShare int) leaseRate
}

// leaseTimes is how an algorithm's leased units age: unit i of a lease
// may be allowed until first + i·step nanoseconds after the lease's round
// trip began, with step = stepNum/stepDen (zero for the counter, whose
// units all last until their window ends).
type leaseTimes struct {
	stepNum, stepDen uint64
}

// leaseRate is what leases depend on of a rate: how their units age, and
// the largest lease, Lease.MaxShare of the capacity.
type leaseRate struct {
	times    leaseTimes
	maxUnits int
}

// initLease sets up the lease mode from c, if c asks for it.
func (l *base) initLease(c config, algo leaseAlgo) {
	if c.lease == nil {
		return
	}
	l.lease = newLeaseTable(*c.lease, algo, algo.rate(c.lease.MaxShare))
	// With the server's clock, local and Redis time may drift apart: a
	// lease's times are shortened by 1/1024 (about 1000 ppm, twice the
	// most NTP ever slews a clock). A client clock is the one clock.
	l.lease.margin = c.now == nil
}

// horizonNs is the lease horizon as a float, for sizing.
func (t *leaseTable) horizonNs() float64 { return float64(t.cfg.Horizon) }

// ceilWant is min(ceil(x), limit) as an int, for a lease size.
func ceilWant(x float64, limit int) int {
	if math.IsNaN(x) || x >= float64(limit) {
		return limit
	}
	return int(math.Ceil(x))
}
