package floodgate

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// Releaser is implemented by limiters whose units a call holds only while
// it runs, rather than spends: the slots of an in-flight limit (InFlight).
// The admission core gives a call's units back when the call settles —
// when its handler returns, also when it panics or its client has hung up
// — so an adapter needs nothing more than its usual Settle.
type Releaser interface {
	// ReleaseN gives back n units that an allowed AllowN took for key.
	// held is how long they were held (0 if unknown); a limiter may use
	// it to estimate how long a refused call should wait.
	ReleaseN(ctx context.Context, key string, n int, held time.Duration) error
}

// InFlight is an in-memory concurrency limit: at most Max units held at
// once per key (NewInFlight), or by every key together
// (NewServiceInFlight), where a call holds its cost (usually 1: a slot)
// from the moment it is allowed until the admission core releases it when
// the call settles, also when its handler panics or its client hangs up.
// "At most 5 requests of an API key in the handler at once" is
// NewInFlight(5) behind the middleware; "at most 200 in the whole
// service" is NewServiceInFlight(200).
//
// AllowN(key, n) takes n slots if the key holds no more than Max−n, and
// reports the decision either way; ReleaseN gives them back. Nothing
// refills by itself: a slot taken through AllowN and never released stays
// taken, which is why the admission core does the releasing.
//
// The Decision reports Max as Limit and the slots free as Remaining. A
// denial's RetryAfter is an estimate, since no one knows when a handler
// returns: the mean time recent calls held their slots (an exponentially
// weighted average over the releases that reported it, 1 s before the
// first), divided by the slots the key holds — how soon the first of them
// ends if calls end independently — and at least a millisecond. ResetAfter
// is that mean while the key holds slots, 0 otherwise.
//
// A service-wide denial is marked Decision.Overloaded: it is no client's
// doing, so the adapters answer it as a busy service (HTTP 503 with
// Retry-After, gRPC and connect Unavailable with a RetryInfo), while a
// per-key denial is the client's own limit (429, ResourceExhausted).
//
// Memory: a key costs an entry (at most 48 bytes, 36 measured) only
// while it holds a slot; it is dropped when its last slot is released,
// so the table holds at most as many keys as there are calls in
// flight, and at most WithMaxKeys (default DefaultMaxKeys), exactly:
// the bound is one count
// for the whole table, not a share per shard, so a table of n keys
// admits n keys holding slots however they hash, and a call of a new key
// beyond that is denied as Overloaded. A shard's map keeps the room of
// the most keys it held at once; the keys are hashed with a seed of the
// limiter's own, which no client knows, so they spread evenly and the
// maps together stay close to n entries. A decision is one lock of one
// shard and, for a key entering or leaving the table, one atomic
// operation (per key), or one atomic operation (service-wide), O(1)
// whatever n.
//
// An InFlight is safe for concurrent use. It takes WithMaxKeys,
// WithMaxKeyLength and WithShards (per key only); the other options do not
// apply and are refused.
type InFlight struct {
	max         int
	serviceWide bool
	total       atomic.Int64 // service-wide: the slots held
	seed        maphash.Seed
	shards      []inflightShard
	mask        uint64
	maxKeys     int64        // WithMaxKeys: the bound on keys holding slots
	keys        atomic.Int64 // keys holding slots, in every shard
	maxKeyLen   int
	hold        holdTime
}

type inflightShard struct {
	mu   sync.Mutex
	held map[uint64]int32 // slots held, per key hash; no zero entries
	_    [48]byte         // keep shards on separate cache lines
}

// kindInFlight names the in-flight limits in option errors.
const kindInFlight = "in-flight limit"

// NewInFlight returns a limit of limit units held at once per key, in
// 1..2^24. It takes WithMaxKeys, WithMaxKeyLength and WithShards; invalid
// values, and options that do not apply, are errors wrapping
// ErrInvalidOption.
func NewInFlight(limit int, opts ...Option) (*InFlight, error) {
	return newInFlight(limit, false, opts)
}

// NewServiceInFlight returns a limit of limit units held at once by every
// key together: a cap on the calls the whole service runs at once, whose
// denials are marked Decision.Overloaded. The key is ignored, and no
// option applies.
func NewServiceInFlight(limit int, opts ...Option) (*InFlight, error) {
	return newInFlight(limit, true, opts)
}

func newInFlight(limit int, serviceWide bool, opts []Option) (*InFlight, error) {
	if limit <= 0 || limit > maxLimit {
		return nil, fmt.Errorf("%w: in-flight limit %d must be in 1..%d", ErrInvalidOption, limit, maxLimit)
	}
	c, err := newConfig(kindInFlight, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case c.now != nil:
		return nil, fmt.Errorf("%w: WithClock does not apply to an %s, which reads no clock", ErrInvalidOption, kindInFlight)
	case c.forgetEvicted:
		return nil, fmt.Errorf("%w: WithForgetEvicted does not apply to an %s, which never evicts a key holding slots", ErrInvalidOption, kindInFlight)
	case serviceWide && c.storeOpt != "":
		return nil, fmt.Errorf("%w: %s does not apply to a service-wide %s, which keeps no keys", ErrInvalidOption, c.storeOpt, kindInFlight)
	}
	l := &InFlight{max: limit, serviceWide: serviceWide, seed: maphash.MakeSeed(), maxKeyLen: c.maxKeyLen}
	if !serviceWide {
		l.shards = make([]inflightShard, c.shards)
		l.mask = uint64(c.shards - 1)
		l.maxKeys = int64(c.maxKeys)
		for i := range l.shards {
			l.shards[i].held = make(map[uint64]int32)
		}
	}
	return l, nil
}

// Max returns the most units a key (or, service-wide, the service) may
// hold at once.
func (l *InFlight) Max() int { return l.max }

// ServiceWide reports whether the limit is one for the whole service
// (NewServiceInFlight), which ignores keys: the middleware and the
// adapters then need no key function, and key none of its calls.
func (l *InFlight) ServiceWide() bool { return l.serviceWide }

// serviceWider is implemented by limits that ignore the key.
type serviceWider interface{ ServiceWide() bool }

// Capacity returns Max: no call can take more.
func (l *InFlight) Capacity() int { return l.max }

// Allow is AllowN(ctx, key, 1).
func (l *InFlight) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN takes n slots for key if it holds no more than Max−n, and
// reports the decision either way; n == 0 reports without taking. A cost
// above Max is ErrCostExceedsLimit. The context is not consulted.
func (l *InFlight) AllowN(_ context.Context, key string, n int) (Decision, error) {
	if n < 0 {
		return Decision{Limit: l.max}, fmt.Errorf("%w: n = %d is negative", ErrInvalidCost, n)
	}
	if l.serviceWide {
		return l.allowService(n)
	}
	if len(key) > l.maxKeyLen {
		return Decision{Limit: l.max}, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), l.maxKeyLen)
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	held := int(sh.held[h])
	allowed := n <= l.max && held+n <= l.max
	full := allowed && n > 0 && held == 0 && !l.enter()
	if allowed = allowed && !full; allowed && n > 0 {
		held += n
		sh.held[h] = int32(held)
	}
	sh.mu.Unlock()
	d := l.decision(allowed, held)
	d.Overloaded = full
	return d, l.costError(n)
}

// allowService is AllowN for the whole service: one counter, updated
// without a lock.
func (l *InFlight) allowService(n int) (Decision, error) {
	for {
		held := l.total.Load()
		if n == 0 || n > l.max || held+int64(n) > int64(l.max) {
			d := l.decision(n == 0, int(held))
			d.Overloaded = n > 0
			return d, l.costError(n)
		}
		if l.total.CompareAndSwap(held, held+int64(n)) {
			return l.decision(true, int(held)+n), nil
		}
	}
}

// costError reports a cost no wait can cure.
func (l *InFlight) costError(n int) error {
	if n > l.max {
		return fmt.Errorf("%w: n = %d, at most %d in flight", ErrCostExceedsLimit, n, l.max)
	}
	return nil
}

// decision reports held slots after a decision.
func (l *InFlight) decision(allowed bool, held int) Decision {
	d := Decision{Allowed: allowed, Limit: l.max, Remaining: max(l.max-held, 0)}
	if held > 0 {
		d.ResetAfter = l.hold.mean()
	}
	if !allowed {
		d.RetryAfter = max(l.hold.mean()/time.Duration(max(held, 1)), time.Millisecond)
	}
	return d
}

// ReleaseN gives back n slots that an allowed AllowN took for key, after
// holding them for held (0: unknown, not counted in the estimate). Giving
// back more than the key holds releases what it holds.
func (l *InFlight) ReleaseN(_ context.Context, key string, n int, held time.Duration) error {
	if n < 0 {
		return fmt.Errorf("%w: release of n = %d is negative", ErrInvalidCost, n)
	}
	if held > 0 {
		l.hold.observe(held)
	}
	if n == 0 {
		return nil
	}
	if l.serviceWide {
		l.releaseService(int64(n))
		return nil
	}
	if len(key) > l.maxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), l.maxKeyLen)
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	if held, ok := sh.held[h]; !ok {
		// Not held: nothing to give back.
	} else if left := int(held) - n; left > 0 {
		sh.held[h] = int32(left)
	} else {
		delete(sh.held, h)
		l.keys.Add(-1)
	}
	sh.mu.Unlock()
	return nil
}

// enter counts a key entering the table, if it has room. It is called
// under the key's shard lock, and a key leaves (keys.Add(-1)) under it
// too, so the count is never below the keys in the table, and is above
// it only while a key is entering or leaving.
func (l *InFlight) enter() bool {
	for {
		k := l.keys.Load()
		if k >= l.maxKeys {
			return false
		}
		if l.keys.CompareAndSwap(k, k+1) {
			return true
		}
	}
}

// releaseService gives n slots back to the service, never below zero.
func (l *InFlight) releaseService(n int64) {
	for {
		held := l.total.Load()
		if l.total.CompareAndSwap(held, max(held-n, 0)) {
			return
		}
	}
}

// Held returns the slots key holds now (service-wide: the service).
func (l *InFlight) Held(key string) int {
	if l.serviceWide {
		return int(l.total.Load())
	}
	sh, h := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return int(sh.held[h])
}

// shard returns key's shard and hash.
func (l *InFlight) shard(key string) (*inflightShard, uint64) {
	h := maphash.String(l.seed, key)
	return &l.shards[h&l.mask], h
}

// holdTime is an exponentially weighted mean of how long calls held their
// slots, updated without a lock: each observation moves it by an eighth of
// its distance.
type holdTime struct {
	ns atomic.Int64 // 0: nothing observed yet
}

// holdTimeUnknown is the mean reported before any observation.
const holdTimeUnknown = time.Second

func (h *holdTime) observe(d time.Duration) {
	for {
		old := h.ns.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if h.ns.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

func (h *holdTime) mean() time.Duration {
	if ns := h.ns.Load(); ns > 0 {
		return time.Duration(ns)
	}
	return holdTimeUnknown
}

var (
	_ Limiter   = (*InFlight)(nil)
	_ Releaser  = (*InFlight)(nil)
	_ Capacitor = (*InFlight)(nil)
)
