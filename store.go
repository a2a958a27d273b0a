package floodgate

import (
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Stats describes the key store of an in-memory limiter.
type Stats struct {
	// Keys is the number of keys tracked now.
	Keys int
	// MaxKeys is the bound on Keys (WithMaxKeys).
	MaxKeys int
	// EvictedIdle counts keys dropped to make room whose state equalled a
	// fresh one: nothing was lost.
	EvictedIdle uint64
	// EvictedLive counts keys dropped to make room while they still held
	// state. A growing count means the store is too small for the
	// traffic, or that someone is spraying keys. Each such key's debt is
	// remembered (see Restored) unless the limiter was built with
	// WithForgetEvicted, in which case each one reset a client's limit.
	EvictedLive uint64
	// Restored counts keys that were not tracked but started from a
	// remembered debt instead of a fresh state: clients coming back after
	// a live eviction, and clients whose key shares its debt memory with
	// one (see Merged).
	Restored uint64
	// Merged counts live evictions whose debt could not keep a place of
	// its own in the fixed-size debt memory and was merged into a bound
	// shared with other keys. From then on, until that bound runs out,
	// new keys that hash to the same place start limited: the price of
	// never forgetting a debt. A non-zero count means MaxKeys is far too
	// small for the traffic, or a key spray is under way.
	Merged uint64
}

// evictProbes is how many candidates (entries neither fresh nor recently
// used) an insert into a full shard examines, at the old end of the list,
// looking for one that can be dropped losslessly. Those it passes over go
// back to the front of the list.
const evictProbes = 4

// store is the bounded, sharded per-key state behind every in-memory
// limiter. Each shard is a simplelru.LRU behind one mutex; the same mutex
// guards the algorithm state, so a decision is one lock and one map lookup.
//
// Keys are not stored: each is hashed with a per-process random seed
// (hash/maphash) to a 64-bit value, which is what the LRU holds. That makes
// every entry the same small size whatever the key, pins no request memory,
// and costs a hash instead of a string comparison. Two distinct keys share
// a limit only if their hashes collide: with k keys tracked the chance of
// any collision is about k²/2⁶⁵ (3·10⁻⁸ for a million keys), and because the
// seed is random an attacker cannot aim for one.
//
// A key dropped while it still holds state leaves its debt in the shard's
// fixed-size debt memory (see debts), and comes back from it: bounded
// memory never lets a spray of keys reset a live limit, unless the limiter
// was built with WithForgetEvicted.
type store[S any] struct {
	seed      maphash.Seed
	shards    []shard[S]
	mask      uint64
	maxKeys   int
	maxKeyLen int
	clock     clock
	// freshAt returns the time (ns since the epoch) from which the state
	// equals a fresh one. Eviction drops such entries first.
	freshAt func(*S) int64
	// restore sets a state to that of a client fully limited until at:
	// a state whose freshAt is at and which, at every time, allows no
	// more than any state whose freshAt is at or before at.
	restore func(st *S, at int64)
}

// slot is one tracked key's state and whether it was used since eviction
// last looked at it.
//
// A hit only sets used; it does not move the entry to the front of the
// LRU list as simplelru's Get would. Moving writes to the entry's two list
// neighbours, which with many keys are cold cache lines: at 100,000 keys it
// cost about 30 % of a decision. Eviction instead gives a used entry its
// second chance when it reaches the old end of the list (the CLOCK
// approximation of LRU), which keeps recently used keys as LRU does while
// a decision touches only its own entry.
type slot[S any] struct {
	st   S
	used bool
}

type shard[S any] struct {
	mu          sync.Mutex
	lru         *simplelru.LRU[uint64, *slot[S]]
	size        int   // capacity of lru; the store evicts before lru would
	last        int64 // latest time seen: an injected clock never goes back
	evictedIdle uint64
	evictedLive uint64
	restored    uint64
	// debts is allocated at the shard's first live eviction, so that a
	// store sized for its traffic never pays for it; it stays nil with
	// WithForgetEvicted (forget).
	debts  *debts
	forget bool
	_      [56]byte // keep shards on separate cache lines (128 B each)
}

func newStore[S any](c config, freshAt func(*S) int64, restore func(*S, int64)) (*store[S], error) {
	if c.shards <= 0 || c.shards&(c.shards-1) != 0 || c.shards > c.maxKeys {
		return nil, fmt.Errorf("%w: %d shards for %d keys", ErrInvalidOption, c.shards, c.maxKeys)
	}
	s := &store[S]{
		seed:      maphash.MakeSeed(),
		shards:    make([]shard[S], c.shards),
		mask:      uint64(c.shards - 1),
		maxKeys:   c.maxKeys,
		maxKeyLen: c.maxKeyLen,
		clock:     newClock(c.now),
		freshAt:   freshAt,
		restore:   restore,
	}
	per, extra := c.maxKeys/c.shards, c.maxKeys%c.shards
	for i := range s.shards {
		size := per
		if i < extra {
			size++
		}
		lru, err := simplelru.NewLRU[uint64, *slot[S]](size, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		s.shards[i].lru, s.shards[i].size = lru, size
		s.shards[i].forget = c.forgetEvicted
	}
	return s, nil
}

// held is a key's state, locked: the caller must unlock sh.mu.
type held[S any] struct {
	sh  *shard[S]
	st  *S    // the key's state; nil if the key is not tracked
	now int64 // the current time, in ns since the epoch
	// owed is, for a key that is not tracked, the time until which it
	// owes a remembered debt; at or before now it owes nothing. The caller
	// then decides from restore(owed), or from a fresh state.
	owed int64
}

// acquire locks the shard that holds key and returns the key's state and
// the current time. If the key is not tracked and create is true, a state
// is inserted for it: restored from its remembered debt if it has one,
// fresh (zero) otherwise. If create is false, an untracked key is
// reported with a nil state and what it owes.
func (s *store[S]) acquire(key string, create bool) (held[S], error) {
	if len(key) > s.maxKeyLen {
		return held[S]{}, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	// Read the clock before taking the lock: it may be user code.
	now := s.clock.nanos()
	sh.mu.Lock()
	if now < sh.last {
		now = sh.last
	} else {
		sh.last = now
	}
	if sl, ok := sh.lru.Peek(h); ok {
		sl.used = true
		return held[S]{sh: sh, st: &sl.st, now: now}, nil
	}
	owed := now
	if sh.debts != nil {
		owed = sh.debts.lookup(h, now)
	}
	if !create {
		return held[S]{sh: sh, now: now, owed: owed}, nil
	}
	st := &sh.insert(h, now, s.freshAt).st
	if owed > now {
		s.restore(st, owed)
		sh.restored++
	}
	return held[S]{sh: sh, st: st, now: now}, nil
}

// insert adds a fresh state for h, making room first if the shard is full.
func (sh *shard[S]) insert(h uint64, now int64, freshAt func(*S) int64) *slot[S] {
	var sl *slot[S]
	if sh.lru.Len() >= sh.size {
		sl = sh.evict(now, freshAt)
		*sl = slot[S]{} // reuse the dropped entry's memory
	} else {
		sl = new(slot[S])
	}
	sh.lru.Add(h, sl)
	return sl
}

// maxSecondChances bounds the used entries one eviction moves back to the
// front before it takes them as candidates anyway, so that an insert into
// a shard whose every entry was just used does not walk the whole shard
// under its lock.
const maxSecondChances = 4 * evictProbes

// evict removes one entry and returns its slot for reuse. It looks at the
// oldest entries in turn: the first one that equals a fresh state is
// dropped; one used since it was last looked at gets a second chance at the
// front of the list (up to maxSecondChances of them); the others, up to
// evictProbes, are candidates. If no entry is fresh, it drops the
// candidate that would have become fresh soonest (the smallest loss) and
// counts a live eviction; the other candidates go to the front.
//
// It probes with GetOldest and moves with Get, which only relinks list
// entries: the whole path allocates nothing, and the insert that follows
// allocates the one list entry simplelru needs for the new key.
func (sh *shard[S]) evict(now int64, freshAt func(*S) int64) *slot[S] {
	var (
		bestKey uint64
		best    *slot[S]
		bestAt  int64
		chances int
	)
	for probes := 0; probes < evictProbes; {
		k, v, ok := sh.lru.GetOldest()
		if !ok {
			break
		}
		at := freshAt(&v.st)
		if at <= now {
			sh.lru.Remove(k)
			sh.evictedIdle++
			return v
		}
		sh.lru.Get(k) // to the front, as a second chance or a passed-over candidate
		if v.used && chances < maxSecondChances {
			v.used = false
			chances++
			continue
		}
		v.used = false
		if best == nil || at < bestAt {
			bestKey, best, bestAt = k, v, at
		}
		probes++
	}
	sh.lru.Remove(bestKey)
	sh.evictedLive++
	if !sh.forget {
		if sh.debts == nil {
			sh.debts = newDebts(sh.size)
		}
		sh.debts.record(bestKey, bestAt, now)
	}
	return best
}

// remove forgets key, and its remembered debt. If the key's debt memory
// still binds it through a bound shared with other keys, which cannot be
// cleared, the key is tracked with a fresh state instead, which takes
// precedence over that memory for as long as the key stays tracked.
func (s *store[S]) remove(key string) error {
	if len(key) > s.maxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	now := s.clock.nanos()
	sh.mu.Lock()
	now = max(now, sh.last)
	sh.lru.Remove(h)
	if sh.debts != nil && sh.debts.forget(h, now) {
		sh.insert(h, now, s.freshAt)
	}
	sh.mu.Unlock()
	return nil
}

// stats sums the shards' counters.
func (s *store[S]) stats() Stats {
	st := Stats{MaxKeys: s.maxKeys}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.lru.Len()
		st.EvictedIdle += sh.evictedIdle
		st.EvictedLive += sh.evictedLive
		st.Restored += sh.restored
		if sh.debts != nil {
			st.Merged += sh.debts.merged
		}
		sh.mu.Unlock()
	}
	return st
}
