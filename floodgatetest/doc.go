// Package floodgatetest is a conformance suite for floodgate limiters: any
// floodgate.Limiter that can also Reset a key — in memory, on Redis, or
// written by you — runs the same checks and must make the same decisions.
// It also holds a concurrency checker (Check, see "The concurrency
// checker" below), which drives a limiter with concurrent random
// operations and holds every history to the limiter's sequential model
// and to invariants.
//
// A limiter's test supplies a factory and names the algorithm it
// implements:
//
//	func TestConformance(t *testing.T) {
//		floodgatetest.Run(t, floodgatetest.Suite{
//			Algorithm: floodgatetest.TokenBucket,
//			New: func(c floodgatetest.Config) (floodgatetest.Limiter, error) {
//				return floodgate.NewTokenBucket(c.Rate, floodgate.WithClock(c.Clock.Now))
//			},
//		})
//	}
//
// The suite calls the factory once per subtest, with the rate (and, for a
// token bucket, the capacity) under test and a fresh Clock that is the
// limiter's only source of time. Nothing sleeps: the suite moves the clock.
//
// # Reference models
//
// For every algorithm the suite runs an obviously correct model beside
// the limiter and requires the very same Decision — Allowed, Limit,
// Remaining, RetryAfter, ResetAfter — at every step:
//
//   - TokenBucket: greedy refill as exact GCRA in rational nanoseconds
//     (math/big). A request of cost n is allowed iff the theoretical arrival
//     time, advanced by n·Period/Limit, is at most burst·Period/Limit ahead
//     of now. RetryAfter and ResetAfter are rounded up to the nanosecond,
//     and Remaining counts whole tokens.
//   - IntervalTokenBucket: Rate.Limit tokens back at once at the end of
//     each Period, periods counted from a key's first event after its
//     bucket was last full; the bucket holds up to the burst.
//   - SlidingLog: the list of every allowed event. At most Limit events in
//     any window (now-Period, now]: an event at t stops counting at
//     t+Period; denied events are not recorded. RetryAfter is when the
//     event that must age out for the request to fit does, Remaining is
//     Limit minus the events in the window, and ResetAfter is the newest
//     event's time plus Period, minus now.
//   - SlidingCounter: the counts of the current and the previous fixed
//     window (Period long, from the clock's start), the previous one
//     weighted by the share of it still in the sliding window, in exact
//     rationals; RetryAfter is the first nanosecond at which the estimate
//     leaves room.
//
// Each model also converts its state to a new rate as floodgate.Inherit
// documents each strategy (see RateChange below).
//
// # What the suite checks
//
// Each check runs as a subtest for several rates, among them some whose
// period does not divide by their limit (3/s, 7 per 10 minutes, 12 per
// 1.001 s) and, with Suite.Bursts, capacities below and above the limit:
//
//   - Timeline: a scripted sequence through every boundary (a burst, 1 ms
//     before and at RetryAfter and ResetAfter, costs above what is left and
//     above the capacity, streams faster than and at the rate, a second
//     key) compared with the model step by step.
//   - RandomTraffic: random costs, waits and resets on three keys from
//     fixed seeds, compared with the model; without a model, held to the
//     rules below.
//   - RetryAfter: a denied request retried after exactly RetryAfter
//     succeeds, and 1 ms earlier it is still denied: the wait is the
//     shortest, as Decision promises.
//   - ResetAfter: after it a report shows the whole quota; for the exact
//     algorithms, 1 ms earlier it does not.
//   - CostExceedsLimit: a cost above the capacity is an error wrapping
//     floodgate.ErrCostExceedsLimit, never allowed, with no RetryAfter
//     (zero, or the largest Duration), and consumes nothing.
//   - NegativeCost: an error wrapping floodgate.ErrInvalidCost, consuming
//     nothing.
//   - ZeroCost: n == 0 is allowed and reports the state without changing
//     it.
//   - Reset: the whole quota comes back; resetting an unused key is no
//     error.
//   - IndependentKeys: keys differing only in case, a trailing space, a
//     NUL byte or a last letter never share a limit.
//   - Concurrent: a few goroutines on one key at a frozen clock are allowed
//     exactly the quota, each unit once, for costs 1, 2 and the capacity.
//   - RateChange, for a limiter that implements floodgate.RateSetter:
//     under each inheritance strategy, a change to a larger and a smaller
//     quota, a longer and a shorter period (and, for a token bucket, a
//     larger burst), and back, met by keys half spent, drained and
//     denied, spent a while ago and never used, compared with the models
//     step by step before, between and after. A limiter that converts a
//     key only when it next decides for it says so
//     (Suite.RateChangeOnNextDecision).
//
// Every decision of every check is also held to the rules any Decision
// obeys: Limit is the capacity; 0 <= Remaining <= Limit; an allowed
// request has RetryAfter 0; a denied one has a positive RetryAfter and a
// Remaining below its cost; ResetAfter is never negative; a request the
// limit can hold never returns an error.
//
// # What the suite needs from the limiter and its store
//
// Time: the limiter must read the time only from Config.Clock. The suite
// moves the clock forward only, by whole milliseconds or by a RetryAfter
// or ResetAfter the limiter itself reported (or that less 1 ms), and every
// period it tests is a whole number of milliseconds. A store may therefore
// keep event times in any unit that divides a millisecond (microseconds,
// say), rounding them up, without changing a decision; a unit that does
// not divide it (a power of two nanoseconds above 64 ns) shifts events off
// the grid and shows as durations a fraction of a unit too long. Durations
// must be reported exactly unless Suite.Resolution says to what unit they
// are rounded up.
//
// Keys: each subtest uses keys of its own, under a random prefix per run,
// so a shared store (a Redis other runs and tests use) needs no cleaning. Keys are a few dozen to about 250 bytes and may hold any byte,
// NUL included.
//
// Expiry: a store that expires state by its own real clock (Redis PEXPIRE)
// sees the suite's clock run far faster than real time, which is harmless,
// except while the suite holds its clock still: up to about a hundred
// decisions on one key can pass at one instant. The shortest horizon the suite uses
// is about 83 ms (a token of 12 per 1.001 s), so such a store must keep
// state for at least the real time those decisions take.
//
// Size: a run makes ten to fifteen thousand decisions, on one goroutine
// except in Concurrent, which uses eight.
//
// # The concurrency checker
//
// Check finds what example tests miss where two calls meet: a decision
// racing a change of rate or plan, a refund, a reservation, an eviction,
// a reply that arrives after its caller gave up. A test describes its
// limiter as a Checker — the Algorithm it promises, its Rate, a New that
// builds it on the checker's clock — and calls Check:
//
//	func TestCheck(t *testing.T) {
//		floodgatetest.Check(t, floodgatetest.Checker{
//			Algorithm: floodgatetest.TokenBucket,
//			Rate:      floodgate.PerSecond(5),
//			New: func(c floodgatetest.CheckConfig) (floodgate.Limiter, error) {
//				return floodgate.NewTokenBucket(c.Rate, floodgate.WithClock(c.Now))
//			},
//		})
//	}
//
// The checker learns what the limiter supports from the interfaces it
// implements (Resetter, Refunder, Charger, Reserver, RateSetter,
// Releaser) and generates programs: rounds of operations on a few keys —
// decisions of any cost, none and above the capacity included; calls
// settled later with a real cost below or above their estimate (a refund
// or a charge); bookings kept or cancelled; resets; SetRate under every
// strategy; plan changes (Checker.Plans, with the checker's resolver);
// in-flight slots taken and released; a key spray (Checker.Spray); and
// steady keys that stay under their quota. Several limiter instances on
// one store (Checker.Instances) and the admission core over them
// (Checker.Gate: waiting, costs known after the response, fail-open) are
// driven the same way. The clock moves between rounds, and, under
// MovingClock, while calls are in flight.
//
// A round's calls are interleaved in one of two ways. The deterministic
// scheduler runs one call at a time and switches at yield points: the
// start of each operation, every read of CheckConfig.Now, and the points
// floodgate marks inside its compound decisions (a Composite between its
// limiters, a PlanLimiter's decision before it waits for its key's
// lookup); it picks the next call from the seed, half the rounds
// by a random walk and half as PCT does (random priorities, two change
// points), so a failure replays from its seed. A yield point reached
// under a lock that another call then waits for would hang it: the
// scheduler notices the round making no progress for five seconds,
// reports where every call was parked, and fails the check. Give
// CheckConfig.Now only where the limiter reads the time holding no lock,
// Clock.Now elsewhere. The free-running mode runs each round's calls on
// their own goroutines at once, for limiters that block or do I/O.
//
// Each history is checked against:
//
//   - the sequential model of the limiter, key by key: is there an order
//     of the calls, consistent with the order in which they were called
//     and returned, in which the model gives every call the outcome it
//     got (linearizability)? The models are this package's reference
//     models (see Reference models) with refunds, charges beyond the
//     quota (on a sliding log or counter, carried into the coming
//     windows up to Checker.MaxDebt), bookings and slots added as
//     floodgate documents them; a
//     change of rate is placed in each key's history within its call, and
//     the time of a call anywhere the clock was between its call and its
//     return. A call whose outcome is unknown (an error after it may have
//     reached the store) may take effect or not. A Lossy limiter (leases,
//     a bounded store, a Composite) is only held to never allowing what
//     the model denies.
//   - the rules of every Decision; no decision under a rate older than
//     one already seen (once SetRate has returned, and for a key once
//     decided under the newer rate); Reset lasting until the key spends
//     again (for a store that may lock a key out by design, a Lossy one
//     with a negative Shortfall, against every debt older than the
//     Reset: a denial that debts of other keys spent since may explain
//     is not counted); no more admitted on a key in any interval than its limit
//     allows there — a bucket's burst plus Rate × T, a log's Limit per
//     window, a counter's per fixed window touched, at the largest rate
//     in force, counting charges, net of refunds, plus what calls then in
//     flight over-spent once over the whole run (WithCostAfter's bound),
//     so that a debt forgiven every window shows over a long run; for a
//     Lossy limiter, at most Shortfall units denied to a steady key over a
//     run; for an in-flight limit, no call denied as Overloaded while the
//     table has room (MaxKeys), no slot held by no one after its lease
//     (SlotLease); for Plans, every decision under a plan its key had, and
//     under fail-open no call of a key with no plan let through.
//
// A failing program is shrunk — rounds, then operations, then workers,
// removed while it still fails alike — and the test fails with the calls
// that violate the property, the seed, and a test to paste that replays
// the shrunk program with Replay. FLOODGATE_CHECK_SEED=seed runs that seed
// alone; FLOODGATE_FULL=1 runs each Check for 20 s instead of 1 s.
// Checker.Find runs programs without a test and returns the Failure.
//
// What it cannot do: replay a free-running program exactly (Replay tries
// it 20 times); replay a failure that depends on a store's random hash
// seed (the in-memory store's eviction order), or on work a limiter does
// on goroutines of its own (a PlanLimiter's lookups, which the scheduler
// lets run free); hold the interval bound on
// a history whose clock moved during calls (MovingClock), where only the
// model is checked; or search beyond 100,000 states of one key, which a
// key of a few hundred calls in rounds of a few never needs (a key that
// does is logged and skipped).
package floodgatetest
