package floodgate

import (
	"fmt"
	"time"
)

// Option configures an in-memory limiter (NewTokenBucket, NewSlidingLog,
// NewSlidingCounter) or the rate.Limiter adapter (FromRateLimiter, which
// takes only WithClock). An option that does not apply to the limiter it
// is given to is reported by the constructor as ErrInvalidOption rather
// than ignored, so a misconfiguration never passes silently. Each option
// may be given once: a repeat (WithBurst twice, say) is ErrInvalidOption
// too, whichever value was meant to win, as for the middleware's options.
type Option func(*config) error

// Defaults of the in-memory store.
const (
	// DefaultMaxKeys is the number of keys a limiter tracks unless
	// WithMaxKeys says otherwise. A token bucket or a sliding counter
	// costs about 30 to 50 bytes per tracked key (measured by
	// BenchmarkTokenBucketBytesPerKey and BenchmarkScale: a 24-byte slot
	// of hash and state in a 128-byte bucket of five, in a table at most
	// 85 % full that grows by a bucket while it is small and by half
	// again from eight), so the default bounds it to
	// roughly 13 MiB. A sliding log
	// costs about 100 bytes with one decision held and 8 more per entry
	// its ring holds, up to Rate.Limit (see SlidingLog). A store that has
	// to drop live keys adds its debt memory, 64 bytes per key of the
	// bound by default (see WithDebtMemory).
	DefaultMaxKeys = 1 << 18
	// MaxShards bounds WithShards: each shard costs 128 bytes up front
	// (TestShardLines), a table once it holds a key and an LRU of its
	// table's pages once it evicts, and beyond a few per core more shards
	// buy nothing.
	MaxShards = 1 << 12
	// DefaultMaxKeyLength is the longest key accepted unless
	// WithMaxKeyLength says otherwise. Longer keys are refused with
	// ErrKeyTooLong; they are never truncated (two clients would then share
	// a limit) nor hashed in full at the caller's expense.
	DefaultMaxKeyLength = 1024
)

// config holds every option; each constructor checks that only the options
// that apply to it were set.
type config struct {
	burst     int
	burstSet  bool
	maxKeys   int
	maxKeyLen int
	shards    int
	now       func() time.Time
	// clock, when set, is shared with other limiters (see
	// TokenBucketPlans): their times have one origin.
	clock       *clock
	interval    bool // token bucket: refill intervally
	countDenied bool // sliding log: record denied attempts too
	// forgetEvicted: no debt memory; a live eviction resets the key.
	forgetEvicted bool
	// debtsPerKey sizes the debt memory (WithDebtMemory).
	debtsPerKey int
	// forgetOverflow: a full debt memory forgets rather than merges.
	forgetOverflow bool
	// debt bounds what a key can owe (WithMaxDebt; DefaultDebtLimits).
	debt    DebtLimits
	debtSet bool
	// storeSeed fixes the store's hash seed when seedFixed (tests only,
	// see withStoreSeed).
	storeSeed uint64
	seedFixed bool
	// storeOpt names the first store option given (WithMaxKeys,
	// WithMaxKeyLength, WithShards), so that a limiter without a key store
	// can refuse it.
	storeOpt string
	// given names the options applied so far, so that a repeat is refused
	// (see once).
	given map[string]bool
}

// option kinds, used to refuse options that do not apply.
const (
	kindTokenBucket = "token bucket"
	kindSlidingLog  = "sliding log"
	kindCounter     = "sliding counter"
	kindShared      = "rate.Limiter adapter"
)

func newConfig(kind string, opts []Option) (config, error) {
	c := config{maxKeys: DefaultMaxKeys, maxKeyLen: DefaultMaxKeyLength, debtsPerKey: DefaultDebtsPerKey, debt: DefaultDebtLimits}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if c.burstSet && kind != kindTokenBucket {
		return c, fmt.Errorf("%w: WithBurst applies to a token bucket, not a %s", ErrInvalidOption, kind)
	}
	if c.interval && kind != kindTokenBucket {
		return c, fmt.Errorf("%w: WithIntervalRefill applies to a token bucket, not a %s", ErrInvalidOption, kind)
	}
	if c.countDenied && kind != kindSlidingLog {
		return c, fmt.Errorf("%w: WithCountDenied applies to a sliding log, not a %s", ErrInvalidOption, kind)
	}
	if c.forgetEvicted && (c.given["WithDebtMemory"] || c.forgetOverflow) {
		return c, fmt.Errorf("%w: WithForgetEvicted keeps no debt memory, so WithDebtMemory and WithForgetOverflow do not apply", ErrInvalidOption)
	}
	if c.debtSet && (kind == kindShared || kind == kindInFlight) {
		return c, fmt.Errorf("%w: WithMaxDebt applies to a limiter that charges beyond its quota, not a %s", ErrInvalidOption, kind)
	}
	if c.storeOpt != "" && kind == kindShared {
		return c, fmt.Errorf("%w: %s applies to a limiter with a key store, not a %s", ErrInvalidOption, c.storeOpt, kind)
	}
	if c.shards == 0 {
		c.shards = defaultShards(c.maxKeys)
	}
	if c.shards > c.maxKeys {
		return c, fmt.Errorf("%w: %d shards for %d keys; need at least one key per shard", ErrInvalidOption, c.shards, c.maxKeys)
	}
	return c, nil
}

// WithBurst sets the capacity of a token bucket: the number of events that
// may happen at once after a quiet spell. The default is Rate.Limit. It
// must be in 1..2^24, like Rate.Limit, and applies only to NewTokenBucket.
func WithBurst(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > maxLimit {
			return fmt.Errorf("%w: burst %d must be in 1..%d", ErrInvalidOption, n, maxLimit)
		}
		c.burst, c.burstSet = n, true
		return c.once("WithBurst")
	}
}

// WithMaxKeys bounds the number of keys the limiter tracks (default
// DefaultMaxKeys). When the bound is reached, keys whose state equals a
// fresh one (a full bucket, an empty window) are dropped first, at no cost;
// dropping a key that still holds state is counted in Stats().EvictedLive,
// and its debt is remembered (a key that comes back starts from an upper
// bound of it) unless WithForgetEvicted. Size the store so that this count stays
// at zero under normal traffic.
//
// The store holds n keys: no key is evicted before the (n+1)-th, however
// the keys fall over the shards (WithShards), and from then on each new
// key takes the place of one evicted (TestStoreHoldsMaxKeys,
// TestStoreHoldsMaxKeysInOneShard, TestStoreNeverExceedsMaxKeysConcurrently).
// The bound is on the total, taken with a compare-and-swap, so shards
// inserting at once never pass it; the one exception is a shard that
// holds no key at all when the store is full, which has none to evict and
// takes one more: at most n + WithShards − 1 keys, reachable only with
// nearly as many shards as keys. A store sized for its clients never
// evicts, and allocates nothing once it holds them; each shard's table is
// sized for its share of n and four standard deviations more, and grows
// beyond that (allocating) only for a shard given more. Its memory grows
// with the keys it holds, up to about 30 to 45 bytes per key of n for a
// token bucket or a sliding counter (BenchmarkScale).
func WithMaxKeys(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: max keys %d must be positive", ErrInvalidOption, n)
		}
		c.maxKeys = n
		c.markStore("WithMaxKeys")
		return c.once("WithMaxKeys")
	}
}

// WithMaxKeyLength sets the longest key, in bytes, the limiter accepts
// (default DefaultMaxKeyLength). Longer keys get ErrKeyTooLong.
func WithMaxKeyLength(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: max key length %d must be positive", ErrInvalidOption, n)
		}
		c.maxKeyLen = n
		c.markStore("WithMaxKeyLength")
		return c.once("WithMaxKeyLength")
	}
}

// WithShards sets the number of independently locked shards of the store.
// It must be a power of two, at most the key bound and at most MaxShards.
// A decision on a tracked key locks only its bucket, so shards matter
// for the insertions and evictions of new keys (a key spray): the
// default is one shard per 4,096 keys of the bound, up to 64.
func WithShards(n int) Option {
	return func(c *config) error {
		if n <= 0 || n&(n-1) != 0 || n > MaxShards {
			return fmt.Errorf("%w: shards %d must be a power of two in 1..%d", ErrInvalidOption, n, MaxShards)
		}
		c.shards = n
		c.markStore("WithShards")
		return c.once("WithShards")
	}
}

// WithForgetEvicted makes the store forget the state of a key it drops
// while that state still limits the client (a live eviction, counted in
// Stats().EvictedLive and Stats().Forgotten), as limiters with a bounded
// LRU usually do. It keeps no debt memory, so WithDebtMemory and
// WithForgetOverflow do not apply.
//
// By default the store remembers each such debt (see WithDebtMemory), and
// a key that comes back starts from what it owed: no one can buy a reset
// of a live limit by spraying keys until theirs is pushed out, and an
// honest key pushed out by a spray comes back charged what it spent.
// Forgetting saves that memory, at the cost that anyone able to send
// MaxKeys fresh keys that spend quota (many IPv6 addresses, account-like
// keys) frees every limited client. Prefer the default; choose forgetting
// only where a reset limit costs nothing.
func WithForgetEvicted() Option {
	return func(c *config) error {
		c.forgetEvicted = true
		c.markStore("WithForgetEvicted")
		return c.once("WithForgetEvicted")
	}
}

// WithDebtMemory sizes the debt memory: room for perKey words of 8
// bytes per key of WithMaxKeys (default DefaultDebtsPerKey, 8: 64 bytes a
// key, BenchmarkDebtMemory), and a few more for the shards of a small
// store that a spray gives more than their share, allocated by each
// shard at its first live eviction, so that a store sized for its
// traffic never pays for it. A sliding log keeps every debt exact, in
// twice the words (128 bytes a key by default). perKey must be in 1..64.
//
// A key the store drops while it still holds state (a live eviction)
// leaves its debt there, in an entry of its own, and comes back from it.
// While at most half the words are taken, a debt takes two and comes back
// exactly: a token bucket with its exact tokens, a window with the units
// it counted. Under pressure (a spray past perKey/2 live evictions per key
// of the bound) debts take one word each, rounded up, and come back as a
// bound: a debt ends later by less than 2^-15 of its remaining time and a
// second (or 8.2 µs; 2.6 s on a day's debt), its amount is rounded up to
// 10 significant bits (exact up to 511 events or tokens), and the key
// restored from it allows no more than it would have: a token bucket with
// its tokens, a sliding counter with its events in the newer window, a
// token bucket with WithIntervalRefill blocked until its last period's
// tokens come back; never longer than the debt's rounded end. A refund made while a key is
// held rounded is not given back (charged more, never less). While every
// debt has an entry of its own no key is charged for another's, except a
// fresh key whose 28-bit fingerprint meets a rounded entry's in its place
// (about one fresh key in 20 million on a memory seven eighths full). Measured with every sprayed key spending its
// whole quota right before 100,000 fresh keys arrive, the default keeps
// every debt in an entry of its own and denies no fresh key up to a spray
// of 8 × MaxKeys keys (docs/reliability.md has the figures,
// `go test -run TestSprayPrice -v`).
//
// Past that size (Stats().DebtCapacity, reached when Stats().Merged or,
// with WithForgetOverflow, Stats().Forgotten starts to grow), a fixed
// memory must either forget a debt or let it bind keys it does not belong
// to. By default it keeps the limit: the debt that ends soonest is merged
// into a bound shared by the keys of its place in the memory, and a new
// key that hashes there waits until it runs out. WithForgetOverflow
// chooses the other way. A larger perKey moves that point further, for
// 8 bytes per key of MaxKeys each.
func WithDebtMemory(perKey int) Option {
	return func(c *config) error {
		if perKey <= 0 || perKey > maxDebtsPerKey {
			return fmt.Errorf("%w: debt memory of %d debts per key must be in 1..%d (WithForgetEvicted keeps none)",
				ErrInvalidOption, perKey, maxDebtsPerKey)
		}
		c.debtsPerKey = perKey
		c.markStore("WithDebtMemory")
		return c.once("WithDebtMemory")
	}
}

// WithForgetOverflow makes a full debt memory forget the debt that ends
// soonest, counted in Stats().Forgotten, instead of merging it into a
// bound shared with other keys (see WithDebtMemory). New keys are then
// never charged for others' debts whatever the spray, but a client whose
// debt was forgotten starts again with a fresh limit: past the memory's
// size, a spray frees limited clients, the soonest-free first. Prefer the
// default where a limit that holds matters more than a stranger's wait
// (sign-up, rewards, login); choose this where a wrongly limited newcomer
// costs more than a client freed early.
func WithForgetOverflow() Option {
	return func(c *config) error {
		c.forgetOverflow = true
		c.markStore("WithForgetOverflow")
		return c.once("WithForgetOverflow")
	}
}

// withStoreSeed fixes the seed the store hashes keys with, which is
// otherwise random per store. It is for tests only (export_store_test.go
// exports it to them): where a key lands in the store, and so which keys
// share a group or a place in the debt memory, depends on the seed, and a
// randomized test that fails must be able to replay the same placement.
// A fixed seed is never offered to users: an attacker who knew it could
// aim keys at one place of the store.
func withStoreSeed(seed uint64) Option {
	return func(c *config) error {
		c.storeSeed, c.seedFixed = seed, true
		c.markStore("withStoreSeed")
		return c.once("withStoreSeed")
	}
}

// WithClock makes the limiter read the time from now instead of the
// system's clock. It exists for tests and simulations: the default clock is
// monotonic, immune to wall-clock steps, whereas an injected clock is taken
// as it is, except that a step backwards is held at the latest time seen (a
// limited client is never released, an idle one never blocked, by going
// back in time).
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.now = now
		return c.once("WithClock")
	}
}

// sharedClock returns the clock the limiter's store reads: its own, or
// the one it shares (see TokenBucketPlans).
func (c *config) sharedClock() clock {
	if c.clock != nil {
		return *c.clock
	}
	return newClock(c.now)
}

// once records that the option name was given and refuses a repeat: two
// WithMaxKeys options, say, are a mistake whichever one was meant to win,
// and the middleware's options follow the same rule.
func (c *config) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("%w: %s given twice", ErrInvalidOption, name)
	}
	if c.given == nil {
		c.given = make(map[string]bool, 4)
	}
	c.given[name] = true
	return nil
}

func (c *config) markStore(name string) {
	if c.storeOpt == "" {
		c.storeOpt = name
	}
}

func defaultShards(maxKeys int) int {
	// A decision takes no shard lock (see store): shards only spread the
	// insertions and evictions of a key spray over several locks. At least
	// 4,096 keys per shard, so that the slack each shard keeps for its
	// share of random keys stays small (see newStore), at most 64 shards.
	n := 1
	for n < 64 && n*2*4096 <= maxKeys {
		n *= 2
	}
	return n
}
