// Package floodgatetest is a conformance suite for floodgate limiters: any
// floodgate.Limiter that can also Reset a key — in memory, on Redis, or
// written by you — runs the same checks and must make the same decisions.
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
package floodgatetest
