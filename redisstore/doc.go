// Package redisstore runs floodgate's limiters on Redis, so that every
// instance of a service makes the same decision: per-instance memory limits
// multiply by the instance count, a shared Redis does not. It works with a
// single server, Sentinel, and Redis Cluster (and Valkey, which speaks the
// same protocol), through go-redis v9 or rueidis.
//
// The limiters are TokenBucket, SlidingLog and SlidingCounter. They
// implement floodgate.Limiter, floodgate.Resetter and floodgate.Refunder
// (so floodgate.All can combine them), take a floodgate.Rate and the
// options of their in-memory counterparts that mean the same thing on
// Redis (WithBurst, WithIntervalRefill, WithCountDenied, WithClock,
// WithMaxKeyLength; the store's WithMaxKeys, WithShards and
// WithForgetEvicted have no counterpart, since Redis holds the keys), and
// make the same decisions: the floodgatetest conformance suite runs
// unchanged against them. For SlidingCounter that holds step for step on
// an injected clock (WithClock) only: its fixed windows are aligned on
// the Unix epoch on Redis and on the limiter's creation in memory, so on
// the server's clock the two count different windows. Each decision is one round trip, one Lua script (embedded in the
// binary, run with EVALSHA and loaded with EVAL when the server answers
// NOSCRIPT), atomic on the server.
//
// For the admission kinds beyond a rate they implement what their
// in-memory twins do, with the same decisions (the counter's on an
// injected clock, as above): all three charge beyond
// their quota (floodgate.Charger, for floodgate.WithCostAfter), and the
// TokenBucket books ahead (floodgate.Reserver, for floodgate.WithWait).
// InFlight (NewInFlight, NewServiceInFlight) is an in-flight limit whose
// slots are leases, one per call, renewed while a live call holds them
// and back within a lease when their instance crashes or gave up on the
// decision that took them (WithSlotLease).
//
// # Clients
//
// The limiters need only a Scripter, a two-method interface. The adapters
// live in their own packages, so a program links only the client it uses:
//
//	import "github.com/floodgate-go/floodgate/redisstore/goredisstore" // go-redis v9
//	import "github.com/floodgate-go/floodgate/redisstore/rueidisstore" // rueidis
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//	probe, err := redisstore.NewTokenBucket(goredisstore.New(rdb),
//		floodgate.Rate{Limit: 10, Period: 10 * time.Minute},
//		redisstore.WithPrefix("fg:probe"))
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
//	signup, err := redisstore.NewSlidingLog(rueidisstore.New(c),
//		floodgate.Rate{Limit: 5, Period: time.Minute},
//		redisstore.WithPrefix("fg:signup"))
//
// Both adapters group concurrent decisions into pipelines (group commit):
// while two batches are in flight, new script calls queue, and when either
// returns the queue goes out as the next batch. A lone caller sends at
// once, with no timer and no added latency; under many callers one round
// trip carries hundreds of decisions. The decisions of one algorithm in a
// batch run as one call of its batch script (on a Cluster, per hash
// slot), which reads TIME once and runs each decision's own script in
// turn, so that the server spends about a third of what redis_rate does
// per decision. Each decision keeps its own deadline and error, a script
// call is never retried (a batch script that the server proves did not
// run is sent again: as EVAL after NOSCRIPT, its decisions alone after a
// redirection), and a call whose caller gives up before its batch is sent
// is withdrawn. See the README for the figures.
//
// # Key layout and expiry
//
// A client key k of a limiter with prefix p (WithPrefix, default
// DefaultPrefix) is stored in one key: p:{k}:tb (token bucket), p:{k}:log
// (sliding log: a sorted set of one entry per decision, named by the
// running total of the units, and a mark of the units no longer counted)
// or p:{k}:sc (sliding counter: both fixed windows), p:{k}:if (in-flight
// limit: each call's slots and lease, and the units held). Only the client key
// stands inside the braces, the Cluster hash tag, so each decision touches
// one slot and clients spread over every node; '%', '{' and '}' in k are
// percent-escaped so they cannot move the tag. Give each policy its own
// prefix: limiters of one algorithm sharing one share their clients'
// state, whatever their rates. Each limiter reports the pattern of its
// keys as its floodgate.Namespacer namespace, so that floodgate's
// selectors, route tables and All refuse two limits of one prefix; two
// such limiters used side by side in business code are not checked.
//
// One key per client means that a maxmemory eviction takes a client's
// whole state or none of it, so a decision never meets half a state; an
// evicted client starts afresh, as after Reset, which is why a Redis that
// holds limits should run with maxmemory-policy noeviction (see the
// README). It also means that a Cluster reshard moves a client's state
// atomically: a single-key script is never refused with TRYAGAIN while its
// slot migrates, and the adapters follow the ASK and MOVED redirections.
//
// Every key expires (PEXPIRE) when its state equals a fresh one: a bucket
// when it is full again, a log when its newest event leaves the window, a
// counter when its counts stop weighing on the estimate. Nothing idle is
// left in Redis. Once the rate has changed (SetRate), a key lives at least
// twice the refresh interval, and an emptied one keeps its rate's version
// alone for that long (see WithRateRefresh).
//
// # Clock and resolution
//
// By default the scripts read the server's TIME, so that every instance
// uses one clock and a skewed application clock cannot corrupt a limit.
// WithClock sends the application's time instead, for tests (the
// conformance suite's fake clock) and simulations.
//
// Times are integer microseconds. Lua numbers are doubles, exact for
// integers below 2^53, so the scripts keep every number an integer below
// that: the token bucket stores its theoretical arrival time as whole
// microseconds plus a remainder in units of 1/Rate.Limit µs, so no rounding
// accumulates whatever the rate, and products that could pass 2^53 are done
// in Go with 128-bit arithmetic or, in the counter's script, in two limbs.
// Periods must be whole microseconds. RetryAfter and ResetAfter are
// reported rounded up to the microsecond; at microsecond-aligned times the
// decisions are exactly those of the in-memory limiters.
//
// # Errors, timeouts and the fallback
//
// Each decision's round trip is bounded by a timeout (WithTimeout, default
// DefaultTimeout = 100 ms); a caller's context whose deadline comes first
// is used as it is, without a timer of its own, and one that can never
// end (context.Background) shares a timer with the decisions of its
// fiftieth of the timeout, its deadline rounded down to it (so it gives up
// after between 98 % and 100 % of the timeout). An error of the round trip
// is returned wrapping ErrRedis and its cause (a refused connection reads
// as one, a timeout names the decision timeout) with a Decision that does
// not allow: the caller's error policy (floodgate's middleware: fail open,
// fail closed or custom) decides. With WithFallback a local limiter,
// typically an in-memory floodgate limiter, answers instead while Redis
// cannot be reached: after a failure all decisions go to it for the probe
// interval (WithProbeInterval, default DefaultProbeInterval = 1 s), then
// one decision tries Redis again, and the limiter is back on Redis as soon
// as one succeeds. The fallback's limit is per instance: with k instances
// a client may get k times its quota during an outage, and nothing
// consumed in it carries over.
//
// A decision that meets a newer rate at every one of its few tries (the
// rate or a key's plan changing faster than instances read it) is not
// an error: Redis answered. It is a denial marked Decision.Overloaded
// (HTTP 503 with Retry-After), which no error policy and no fallback lets
// through, counted in Stats.ChurnDenials.
//
// A caller whose context is cancelled (the client hung up) is not an
// outage: its decision returns an error wrapping context.Canceled and not
// ErrRedis, nothing is sent if it hung up first, and neither the fallback
// nor its probe interval hears of it. A service must still be able to
// start while Redis is down: rueidis.NewClient fails then, so use
// rueidisstore.Lazy, which connects on first use (go-redis clients
// connect lazily by themselves).
//
// # Failover
//
// Redis replicates asynchronously: a decision the master has answered may
// not have reached the replica when Sentinel promotes it, and is then
// lost: the client it charged gets that much quota again. The loss is
// bounded by the replication lag (usually below a millisecond, more under
// load). goredisstore.WithWaitReplicas and rueidisstore.WithWaitReplicas
// send WAIT after each batch, so that a decision returns only once n
// replicas hold it: what a failover can then lose is limited to decisions
// still in flight. When the replicas do not acknowledge in time, a denial
// is still returned as a denial, with no error, and only an allowed
// decision fails with ErrNotReplicated (it was charged on the master), so
// that no error policy or fallback can turn a denial into a pass. The
// scripts' replies are read before WAIT is sent, and WAIT is bounded by
// the callers' deadlines (at most a third of what is left, given up on
// at half), so that a replica that does not answer never turns a
// denial into a timeout either. The README gives the cost.
//
// # Retries
//
// A client that retries a script after a timeout or a dropped connection
// may run it twice, when the first attempt reached the server: one request
// charged twice. go-redis does that by default (MaxRetries: 3); the
// goredisstore adapter marks its script calls as not retryable, so it
// never happens whatever MaxRetries says. rueidis never retries a command
// that writes. The limiters themselves never retry a decision; only a
// NOSCRIPT reply, which means nothing ran, is followed by EVAL. A timeout
// still leaves one ambiguity no client can remove: the script may have run
// after the caller gave up, consuming for a request that was answered with
// an error.
//
// # Deny cache
//
// WithDenyCache keeps, in process, keys that Redis denied, until their
// RetryAfter has passed or for DenyCacheMaxAge (1 s), whichever is first,
// and answers them without a round trip: a flood from one client costs
// one Redis call per second instead of one per request (measured in the
// README: 3 commands per denied request without the cache, about 0.01
// with it). The answer is Redis's: until RetryAfter the request cannot fit
// whatever other instances do, since others can only consume more, and
// time only moves the state towards "fits". Only a Reset, a refund or a
// change of rate breaks that. This process clears its own entry on a
// Reset or refund by the time the call returns, and caches no denial
// whose round trip overlapped it (a generation per key, read before the
// round trip, checked before the store); another instance's reaches it
// within DenyCacheMaxAge,
// which is how long a client can be denied by a stale entry. A change of
// rate reaches it by the time SetRate returns: an entry answers only
// under the rate version it was denied under, read within the refresh
// interval. Since a cached answer cannot know what other instances did,
// its RetryAfter is what is left of the entry's age (at most
// DenyCacheMaxAge), never the denial's full wait; Remaining and
// ResetAfter are those of the denial, aged.
// WithCountDenied cannot be combined with it: denials answered in process
// would not be recorded.
//
// # Changing a rate
//
// Every limiter takes a new rate while serving (SetRate, as in memory;
// see floodgate.Inherit for what each key keeps). The rate is kept in
// Redis, in one record per limiter (p:rate:tb, p:rate:tbi, p:rate:log,
// p:rate:sc), which every instance reads again once a refresh interval
// (WithRateRefresh); SetRate writes the record and waits that interval,
// so every instance decides under the new rate once it returns. Each
// state carries the version and rate it was written under, and is
// converted at its first decision after a change, as of the change's
// time, by a script that takes a conversion only under the rate it was
// computed for; a state newer than an instance knows makes it read the
// record at once. SetRate's write has the caller's deadline, and a lost
// reply is ErrRateUnconfirmed, settled by calling it again with the same
// change. A floodgate.PlanLimiter over these limiters converts a key's
// state in place when its plan changes (AllowPlanN), as
// PlanConfig.Inherit says. See ratechange.go and the README for the
// details.
//
// # Leased quota
//
// WithLease turns on an opt-in mode of the token bucket and the sliding
// counter for hot keys: a decision that goes to Redis takes, in the same
// round trip, a share of the key's quota (charged in Redis at once), and
// the instance allows the key's next requests from that share in memory,
// with no round trip, until it is spent or its time is up. A lease is
// sized to the key's local rate over Lease.Horizon (50 ms by default),
// grows at most to twice the last lease (or twice the requests that waited
// for it) and shrinks to one unit when Redis denies or fails: a key with
// few requests here, or a small limit, leases one unit, which is the
// plain round trip. When a lease holds less than the key spends in about
// four round trips, the caller that took the unit also takes the next
// lease before it returns, so that the key's other callers never wait.
// WithIntervalRefill cannot be combined with it (no GCRA slots), and with
// WithWaitReplicas a lease the replicas did not acknowledge is never used.
//
// Leases never let more through than one exact limiter, whatever the
// number of instances. Token bucket: GCRA gives each unit a slot on one
// timeline; a leased unit is allowed only until its slot begins, so every
// unit allowed anywhere starts its slot no earlier than it was allowed and
// ends it no later than burst·Period/Limit after: any interval of length d
// holds at most burst + d·Limit/Period allowed units, the exact bound.
// Sliding counter: leased units are counted in the window they were leased
// in and allowed only before it ends, so each window counts everything
// allowed in it and every local decision fits the estimate the lease was
// checked against. With the server's clock lease times are shortened by
// 1/1024 against drift between the local and the Redis clock.
//
// What the mode can cost is quota, never more of it: a leased unit that is
// not allowed in time (its instance stopped, went idle, was evicted from
// the local table, or reset the key) is lost as if used, until it would
// have refilled. A lease is at most max(1, capacity/Lease.MaxShare) units
// (1/16 of the burst or limit by default), and an instance holds of a key
// at most a lease and the next one, taken when the first holds less than
// half: 1.5 times that at any moment, which is the most an instance that
// stops costs each key, once.
//
// The sliding counter gives back what its leases leave unused to the
// window the units were counted in, the current one or the one before:
// with the instance's next round trip of the key, or, on the server's
// clock, by a timer when the lease ends (a grace of four round trips
// later, at least 1 ms, at most Horizon). A closed window then counts
// only the units allowed in it; a unit is lost only when its give-back
// fails or reaches Redis after the next window has ended too, or its
// instance stops or drops the key first — at most what the instance held,
// each time, never once per window. Its leases never take a key's last
// half lease of room (max(1, limit/(2·MaxShare))): near its limit a key
// is decided one request at a time, so that units other instances hold
// unused never deny a request while demand stays steady within the quota.
// The bucket's unused tail goes back with the instance's next lease while
// no slot was handed out after it; otherwise it is lost, at most a lease
// each time. A token bucket lease is placed up to
// min(Horizon, capacity/MaxShare units) ahead when the key's local rate is
// below its refill rate, so that its units last until they are used:
// quota spent on purpose, none under saturation. LeaseStats counts all of
// it, and the README gives the figures.
//
// Denials always come from Redis, in which leased units count as taken,
// so RetryAfter is Redis's exact answer (an upper bound when units are
// given back before it passes). Remaining and ResetAfter of a local
// decision are Redis's as of the lease plus the units this instance still
// holds, aged by the time passed: for one instance, the plain limiter's.
// Reset forgets the key in Redis and drops this instance's lease; other
// instances' leases keep their units until their time is up, so right
// after a Reset the key can allow its capacity plus at most the units
// they hold. RefundN gives units back to the instance's own lease when
// it allowed them from it, and otherwise to Redis, never below what
// leases may still allow: the client's one key carries a mark after its
// plain state while a lease may allow units (the bucket: the end of the
// latest lease's slots; the counter: the units leased in the current
// window), which the plain decision, sent by a leasing instance when it
// leases nothing, keeps when it writes.
// Run every instance of a policy in the same mode: a plain limiter's
// RefundN or Reset does not know of leases.
//
// The sliding log does not lease (NewSlidingLog refuses WithLease). It
// could: a leased entry scored at the lease's end would keep its units
// counted a Period after their last possible use, at the price of holding
// them that much longer. It is not built: the log is the choice for
// exact small quotas (sign-up: 5 a minute), whose keys are not hot enough
// to lease, and there a lease could only hold units back.
package redisstore
