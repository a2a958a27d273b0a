// This file holds the store before issue 33, kept (in a test file, so
// that it is not built into the package) to measure the new
// one against it in the same run (BenchmarkStoreLayout) until the new one
// replaces it.

package floodgate

import (
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// oldKeysPerGroup is the mean number of keys per group of a full shard (see
// store).
const oldKeysPerGroup = 8

// oldEvictGroups is how many groups, at the old end of the LRU, an insert
// into a full shard examines for a key it can drop losslessly, by the
// number of evictions in a row that found none (see shard.misses): many
// while evictions find idle keys, since one that finds none then is
// probably unlucky (a burst of inserts into the shard has pushed young
// keys to the old end), and few during a spray of live keys, where every
// examination is in vain. Measured on a 100,000-key store sprayed with
// random keys 14 % of which were idle at any time, the first 16 groups
// held an idle key in all but 6 of 900,000 evictions, and the chance of
// missing one fell to about three quarters with each group more.
var oldEvictGroups = [...]int{64, 8, 2}

// store is the bounded, sharded per-key state behind every in-memory
// limiter: one mutex per shard guards the shard's keys, their state and
// its debt memory, so a decision is one lock and one short scan.
//
// Keys are not stored: each is hashed with a per-process random seed
// (hash/maphash) to a 64-bit value, which is what the shard keeps. That
// makes every entry the same small size whatever the key, pins no
// request memory, and costs a hash instead of a string comparison. Two
// distinct keys share a limit only if 62 bits of their hashes collide:
// with k keys tracked the chance of any collision is about k²/2⁶³ (10⁻⁷
// for a million keys), and because the seed is random an attacker cannot
// aim for one.
//
// A shard files its keys in groups by the top bits of their hashes, and
// doubles the number of groups as it fills, so that a full shard has
// about oldKeysPerGroup keys per group. A group is a slice of slots (hash
// and state, 24 bytes for a token bucket); the shard finds it by index,
// so a decision reads the group's slice header and scans a few slots.
// golang-lru's simplelru orders the groups for eviction: a new group
// goes to the front, and eviction examines groups from the old end,
// dropping the first key whose state equals a fresh one (nothing is lost)
// and moving the groups it passes over to the front. A hit marks its
// slot instead of moving anything; eviction gives a marked key a second
// chance (the CLOCK approximation of LRU). Keeping several keys per LRU
// entry is what brings a tracked key under 100 bytes: simplelru's entry
// and map slot alone cost more than that per key.
//
// A key dropped while it still holds state leaves its debt in the
// shard's fixed-size debt memory (see debts), and comes back from it:
// bounded memory never lets a spray of keys reset a live limit, unless
// the limiter was built with WithForgetEvicted.
type oldStore[S any, A algorithm[S, A]] struct {
	seed maphash.Seed
	// fixedSeed, with seedFixed, replaces seed in tests (withStoreSeed).
	fixedSeed uint64
	seedFixed bool
	shards    []oldShard[S, A]
	mask      uint64
	maxKeys   int
	maxKeyLen int
	clock     clock
	// debtsPerKey sizes each shard's debt memory; 0: WithForgetEvicted.
	debtsPerKey    int
	forgetOverflow bool
	// changeMu makes changes of rate one at a time (see change).
	changeMu sync.Mutex
}

// slot is one tracked key: tag is its hash (see store.hash) with bit 0
// its mark, set when the key is used and cleared when eviction passes it
// over; bit 1, always set, keeps a slot in use from being zero.
type oldSlot[S any] struct {
	tag uint64
	st  S
}

type oldShard[S any, A algorithm[S, A]] struct {
	mu sync.Mutex
	// alg holds the parameters the shard's keys and debts are in.
	alg   A
	last  int64 // latest time seen: an injected clock never goes back
	gbits uint  // the shard has 1<<gbits groups
	pages [][]oldSlot[S]
	// groups orders the non-empty groups for eviction.
	groups   *simplelru.LRU[uint32, struct{}]
	keys     int // tracked now
	size     int // bound on keys
	maxGbits uint
	// misses counts evictions in a row that found no fresh key, up to 2
	// (see oldEvictGroups).
	misses int
	// debts is allocated at the shard's first live eviction, so that a
	// store sized for its traffic never pays for it; it stays nil with
	// WithForgetEvicted.
	debts *debts
	// scratch holds the state of an untracked key for a decision that
	// does not keep it (a report, a refund on a remembered debt).
	scratch                            S
	evictedIdle, evictedLive, restored uint64
	forgotten                          uint64
	_                                  [64]byte // keep shards' hot fields on separate cache lines
}

func newOldStore[S any, A algorithm[S, A]](c config, alg A) (*oldStore[S, A], error) {
	if c.shards <= 0 || c.shards&(c.shards-1) != 0 || c.shards > c.maxKeys {
		return nil, fmt.Errorf("%w: %d shards for %d keys", ErrInvalidOption, c.shards, c.maxKeys)
	}
	s := &oldStore[S, A]{
		seed:           maphash.MakeSeed(),
		fixedSeed:      c.storeSeed,
		seedFixed:      c.seedFixed,
		shards:         make([]oldShard[S, A], c.shards),
		mask:           uint64(c.shards - 1),
		maxKeys:        c.maxKeys,
		maxKeyLen:      c.maxKeyLen,
		clock:          c.sharedClock(),
		debtsPerKey:    c.debtsPerKey,
		forgetOverflow: c.forgetOverflow,
	}
	if c.forgetEvicted {
		s.debtsPerKey = 0
	}
	per, extra := c.maxKeys/c.shards, c.maxKeys%c.shards
	for i := range s.shards {
		sh := &s.shards[i]
		sh.alg = alg
		sh.size = per
		if i < extra {
			sh.size++
		}
		for oldKeysPerGroup<<sh.maxGbits < sh.size {
			sh.maxGbits++
		}
		sh.pages = make([][]oldSlot[S], 1)
		sh.groups = oldNewGroups(1)
	}
	return s, nil
}

func oldNewGroups(n int) *simplelru.LRU[uint32, struct{}] {
	lru, err := simplelru.NewLRU[uint32, struct{}](n, nil)
	if err != nil {
		panic(err) // n > 0 always
	}
	return lru
}

// hash checks key's length and returns its hash, with its two lowest
// bits set: those bits mark a slot (see slot), and bits 2 and up pick the
// shard.
func (s *oldStore[S, A]) hash(key string) (uint64, error) {
	if len(key) > s.maxKeyLen {
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	return s.sum(key) | 3, nil
}

func (s *oldStore[S, A]) sum(key string) uint64 {
	if s.seedFixed {
		return fixedSum(s.fixedSeed, key)
	}
	return maphash.String(s.seed, key)
}

// shard returns the shard of h.
func (s *oldStore[S, A]) shard(h uint64) *oldShard[S, A] { return &s.shards[h>>2&s.mask] }

// hold returns now, read before the shard's lock was taken (the clock may
// be user code), held at the latest time the shard has seen: two callers
// may read the clock in one order and lock in the other. The shard must
// be locked.
func (sh *oldShard[S, A]) hold(now int64) int64 {
	if now < sh.last {
		return sh.last
	}
	sh.last = now
	return now
}

// run calls f with the algorithm of key's shard (the parameters of the
// rate its keys are in), key's state and the current time, under the
// lock of the shard. A key that is not tracked is inserted when create
// is true, starting from what the debt memory says it owes; otherwise f
// gets a scratch state built the same way, which is not kept. f must not
// keep st.
func (s *oldStore[S, A]) run(key string, create bool, f func(alg A, st *S, now int64)) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock() // released below, not deferred: a defer cost the hot path 1–2 ns of 60
	now = sh.hold(now)
	var st *S
	if sl := sh.find(h); sl != nil {
		st = &sl.st
	} else {
		st = s.miss(sh, h, now, create)
	}
	f(sh.alg, st, now)
	sh.mu.Unlock()
	return nil
}

// refund calls f with key's state under its shard's lock, to give units
// back. A key that is not tracked but owes a remembered debt gets the
// refund on that debt, which is remembered as it is afterwards: a refund
// is not lost because the key was evicted. A key that owes nothing is
// left alone.
func (s *oldStore[S, A]) refund(key string, f func(alg A, st *S, now int64)) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if sl := sh.find(h); sl != nil {
		f(sh.alg, &sl.st, now)
		return nil
	}
	if sh.debts == nil {
		return nil
	}
	v := sh.debts.find(h, now).owed(now)
	if !v.owes(now) {
		return nil
	}
	sh.alg.restore(&sh.scratch, v, now)
	f(sh.alg, &sh.scratch, now)
	sh.debts.put(h, sh.alg.debt(&sh.scratch, now), now)
	return nil
}

// reset forgets key and its remembered debt. If a bound shared with other
// keys binds the key's place in the debt memory, the key is shielded
// from it for as long as it lasts: the key stays free until it spends
// again, whatever happens to the store in between.
func (s *oldStore[S, A]) reset(key string) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if g, i, ok := sh.locate(h); ok {
		sh.remove(g, i)
	}
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	return nil
}

// change moves every shard to alg, the parameters of a new rate: under
// each shard's lock in turn, every key the shard tracks and every debt it
// remembers is converted as how says, at the shard's now, and from then
// on its keys are decided under alg. A decision sees a key either before
// the change or after it, never halfway; shards not reached yet decide
// under the old rate a moment longer. The cost is one conversion per
// tracked key and per remembered debt, shard by shard: no shard is held
// for longer than its own keys take. Changes are made one at a time, and
// publish (the limiter's record of its current rate) runs after the last
// shard, before the next change can begin.
func (s *oldStore[S, A]) change(alg A, how Inherit, publish func()) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	defer publish()
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.clock.nanos()
		sh.mu.Lock()
		now = sh.hold(now)
		sh.change(alg, how, now)
		sh.mu.Unlock()
	}
}

// change converts the shard's keys and debts to alg at now (see
// store.change). The shard must be locked.
func (sh *oldShard[S, A]) change(alg A, how Inherit, now int64) {
	for _, p := range sh.pages {
		for i := range p {
			sh.alg.convert(&p[i].st, alg, how, now)
		}
	}
	if sh.debts != nil {
		// A remembered debt is in the units of the rate it was recorded
		// under: it is converted as the state it restores to would be.
		// A state restored from a debt allows no more than the key did,
		// and a conversion keeps that order, so a key that comes back
		// after the change allows no more than it would have had it
		// stayed tracked (see algorithm.convert).
		sh.debts.remap(func(v debt) debt {
			sh.alg.restore(&sh.scratch, v, now)
			sh.alg.convert(&sh.scratch, alg, how, now)
			return alg.debt(&sh.scratch, now)
		}, now)
	}
	sh.alg = alg
}

// take removes key from the store and returns its state, converted to
// alg as how says, at the shard's now: the state it is tracked with, or
// the one its remembered debt restores to; ok is false when it owes
// nothing. The key is forgotten durably, as by reset. A PlanLimiter
// takes a key from the limiter of its old plan this way, to put it (put)
// into the limiter of its new one.
func (s *oldStore[S, A]) take(key string, alg A, how Inherit) (st S, ok bool, err error) {
	h, err := s.hash(key)
	if err != nil {
		return st, false, err
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if g, i, found := sh.locate(h); found {
		st = sh.pages[g][i].st
		sh.remove(g, i)
	} else if sh.debts != nil {
		sh.alg.restore(&st, sh.debts.find(h, now).owed(now), now)
	}
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	if !sh.alg.debt(&st, now).owes(now) {
		return st, false, nil
	}
	sh.alg.convert(&st, alg, how, now)
	return st, alg.debt(&st, now).owes(now), nil
}

// put makes st key's state, replacing whatever the store held for it,
// tracked or remembered. st must be in the units of the algorithm of
// key's shard (see take).
func (s *oldStore[S, A]) put(key string, st S) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	sl := sh.find(h)
	if sl == nil {
		if sh.keys >= sh.size {
			s.evict(sh, now)
		}
		*sh.insert(h) = st
		return nil
	}
	sl.st = st
	return nil
}

// owes reports whether key is tracked with state, or remembered owing.
func (s *oldStore[S, A]) owes(key string) bool {
	h, err := s.hash(key)
	if err != nil {
		return false
	}
	sh, now := s.shard(h), s.clock.nanos()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if sl := sh.find(h); sl != nil {
		return sh.alg.debt(&sl.st, now).owes(now)
	}
	return sh.debts != nil && sh.debts.find(h, now).owed(now).owes(now)
}

// alg returns the algorithm of key's shard, for a conversion into it
// (take); a key too long is refused by take or put anyway.
func (s *oldStore[S, A]) algOf(key string) A {
	h := s.sum(key) | 3
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.alg
}

// stats sums the shards' counters.
func (s *oldStore[S, A]) stats() Stats {
	st := Stats{MaxKeys: s.maxKeys}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.keys
		st.EvictedIdle += sh.evictedIdle
		st.EvictedLive += sh.evictedLive
		st.Restored += sh.restored
		st.Forgotten += sh.forgotten
		if sh.debts != nil {
			st.Merged += sh.debts.merged
			st.Forgotten += sh.debts.forgotten
		}
		sh.mu.Unlock()
		if s.debtsPerKey > 0 {
			st.DebtCapacity += debtBuckets(sh.size, s.debtsPerKey) * debtWords
		}
	}
	return st
}

// group returns the group of h.
func (sh *oldShard[S, A]) group(h uint64) uint32 { return uint32(h >> (64 - sh.gbits)) }

// find returns h's slot, marked as used, or nil.
func (sh *oldShard[S, A]) find(h uint64) *oldSlot[S] {
	p := sh.pages[sh.group(h)]
	for i := range p {
		if p[i].tag|1 == h {
			p[i].tag |= 1
			return &p[i]
		}
	}
	return nil
}

// locate returns h's group and index in it.
func (sh *oldShard[S, A]) locate(h uint64) (uint32, int, bool) {
	g := sh.group(h)
	for i, sl := range sh.pages[g] {
		if sl.tag|1 == h {
			return g, i, true
		}
	}
	return 0, 0, false
}

// miss returns the state of h, which is not tracked: a new slot if
// create is true, the shard's scratch state otherwise, either restored
// from what the debt memory says h owes.
func (s *oldStore[S, A]) miss(sh *oldShard[S, A], h uint64, now int64, create bool) *S {
	st := &sh.scratch
	if create {
		if sh.keys >= sh.size {
			s.evict(sh, now)
		}
		st = sh.insert(h)
	}
	var v debt
	if sh.debts != nil {
		f := sh.debts.find(h, now)
		v = f.owed(now)
		if create && f.own != nil {
			// Tracked from now on: its entry is needed no more, except
			// as a shield from a shared bound (see debts.put).
			sh.debts.put(h, debt{}, now)
		}
	}
	sh.alg.restore(st, v, now)
	if create && v.owes(now) {
		sh.restored++
	}
	return st
}

// insert adds a slot for h, not marked (a key used once, as a sprayed
// one is, is dropped before a key that came back), and returns its
// state, zero.
// The shard must have room.
func (sh *oldShard[S, A]) insert(h uint64) *S {
	if sh.keys >= oldKeysPerGroup<<sh.gbits && sh.gbits < sh.maxGbits {
		sh.split()
	}
	g := sh.group(h)
	p := sh.pages[g]
	if len(p) == 0 {
		sh.groups.Add(g, struct{}{})
	}
	if len(p) == cap(p) {
		p = append(make([]oldSlot[S], 0, len(p)+1+len(p)/4), p...)
	}
	p = append(p, oldSlot[S]{tag: h &^ 1})
	sh.pages[g] = p
	sh.keys++
	return &p[len(p)-1].st
}

// remove drops the i-th slot of group g, keeping the others in order.
func (sh *oldShard[S, A]) remove(g uint32, i int) {
	p := sh.pages[g]
	copy(p[i:], p[i+1:])
	p[len(p)-1] = oldSlot[S]{}
	p = p[:len(p)-1]
	switch {
	case len(p) == 0:
		p = nil
		sh.groups.Remove(g)
	case cap(p) > 2*len(p)+2:
		p = append([]oldSlot[S](nil), p...)
	}
	sh.pages[g] = p
	sh.keys--
}

// split doubles the groups: each splits in two by the next bit of its
// keys' hashes, the halves keeping the group's place in the LRU order.
// It costs one pass over the shard's keys, once per doubling.
func (sh *oldShard[S, A]) split() {
	order := sh.groups.Keys() // oldest first
	old := sh.pages
	sh.gbits++
	sh.pages = make([][]oldSlot[S], 1<<sh.gbits)
	sh.groups = oldNewGroups(1 << sh.gbits)
	for _, g := range order {
		p := old[g]
		high := 0 // keys for group 2g+1
		for _, sl := range p {
			high += int(sh.group(sl.tag) & 1)
		}
		lo, hi := make([]oldSlot[S], 0, len(p)-high), make([]oldSlot[S], 0, high)
		for _, sl := range p {
			if sh.group(sl.tag)&1 == 0 {
				lo = append(lo, sl)
			} else {
				hi = append(hi, sl)
			}
		}
		for i, half := range [2][]oldSlot[S]{lo, hi} {
			if len(half) > 0 {
				sh.pages[2*g+uint32(i)] = half
				sh.groups.Add(2*g+uint32(i), struct{}{})
			}
		}
	}
}

// evict drops one key of a full shard. It examines the groups at the old
// end of the LRU, up to oldEvictGroups of them (see misses): the first key whose state
// equals a fresh one is dropped at no cost. The others lose their mark
// (their second chance) and their group goes to the front. If none was
// fresh, the key that would have become fresh soonest among those not
// marked (among all, if every one was) is dropped: a live eviction, whose
// debt is remembered.
func (s *oldStore[S, A]) evict(sh *oldShard[S, A], now int64) {
	var best struct {
		g      uint32
		i      int
		v      debt
		marked bool
		ok     bool
	}
	for range min(oldEvictGroups[sh.misses], sh.groups.Len()) {
		g, _, _ := sh.groups.GetOldest()
		p := sh.pages[g]
		for i := range p {
			v := sh.alg.debt(&p[i].st, now)
			if !v.owes(now) {
				sh.remove(g, i)
				sh.evictedIdle++
				sh.misses = 0
				return
			}
			marked := p[i].tag&1 != 0
			p[i].tag &^= 1
			if !best.ok || best.marked && !marked || best.marked == marked && v.at < best.v.at {
				best.g, best.i, best.v, best.marked, best.ok = g, i, v, marked, true
			}
		}
		sh.groups.Get(g) // passed over: to the front
	}
	h := sh.pages[best.g][best.i].tag | 1
	sh.remove(best.g, best.i)
	sh.evictedLive++
	sh.misses = min(sh.misses+1, 2)
	s.remember(sh, h, best.v, now)
}

// remember keeps the debt v of h, evicted live, in the shard's debt
// memory, allocating it on first use, or forgets it (WithForgetEvicted).
func (s *oldStore[S, A]) remember(sh *oldShard[S, A], h uint64, v debt, now int64) {
	if s.debtsPerKey == 0 {
		sh.forgotten++
		return
	}
	if sh.debts == nil {
		sh.debts = newDebts(debtBuckets(sh.size, s.debtsPerKey), s.forgetOverflow, h)
	}
	sh.debts.put(h, v, now)
}
