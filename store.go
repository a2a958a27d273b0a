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
	// state: each one reset a client's limit. A growing count means the
	// store is too small for the traffic, or that someone is spraying keys.
	EvictedLive uint64
}

// evictProbes is how many of the least recently used entries an insert into
// a full shard examines, looking for one that can be dropped losslessly.
// Live entries it passes over get a second chance at the front of the list.
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
}

type shard[S any] struct {
	mu          sync.Mutex
	lru         *simplelru.LRU[uint64, *S]
	size        int   // capacity of lru; the store evicts before lru would
	last        int64 // latest time seen: an injected clock never goes back
	evictedIdle uint64
	evictedLive uint64
	_           [16]byte // keep shards on separate cache lines
}

func newStore[S any](c config, freshAt func(*S) int64) (*store[S], error) {
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
	}
	per, extra := c.maxKeys/c.shards, c.maxKeys%c.shards
	for i := range s.shards {
		size := per
		if i < extra {
			size++
		}
		lru, err := simplelru.NewLRU[uint64, *S](size, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		s.shards[i].lru, s.shards[i].size = lru, size
	}
	return s, nil
}

// acquire locks the shard that holds key and returns it with the key's
// state and the current time. The caller must unlock sh.mu. If the key is
// not tracked, st is a fresh (zero) state inserted for it when create is
// true, and nil otherwise.
func (s *store[S]) acquire(key string, create bool) (sh *shard[S], st *S, now int64, err error) {
	if len(key) > s.maxKeyLen {
		return nil, nil, 0, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	h := maphash.String(s.seed, key)
	sh = &s.shards[h&s.mask]
	// Read the clock before taking the lock: it may be user code.
	now = s.clock.nanos()
	sh.mu.Lock()
	if now < sh.last {
		now = sh.last
	} else {
		sh.last = now
	}
	st, ok := sh.lru.Get(h)
	if !ok && create {
		st = sh.insert(h, now, s.freshAt)
	}
	return sh, st, now, nil
}

// insert adds a fresh state for h, making room first if the shard is full.
func (sh *shard[S]) insert(h uint64, now int64, freshAt func(*S) int64) *S {
	var st *S
	if sh.lru.Len() >= sh.size {
		st = sh.evict(now, freshAt)
		var zero S
		*st = zero // reuse the dropped entry's memory
	} else {
		st = new(S)
	}
	sh.lru.Add(h, st)
	return st
}

// evict removes one entry and returns its state for reuse. It looks at up
// to evictProbes of the least recently used entries and drops the first
// one that equals a fresh state. If all of them still hold state, it drops
// the one that would have become fresh soonest (the smallest loss) and
// counts a live eviction; the others get a second chance at the front of
// the list.
//
// It probes with GetOldest and gives the second chance with Get, which only
// relinks list entries: the whole path allocates nothing, and the insert
// that follows allocates the one list entry simplelru needs for the new key.
func (sh *shard[S]) evict(now int64, freshAt func(*S) int64) *S {
	var (
		bestKey uint64
		best    *S
		bestAt  int64
	)
	for i := 0; i < evictProbes; i++ {
		k, v, ok := sh.lru.GetOldest()
		if !ok {
			break
		}
		at := freshAt(v)
		if at <= now {
			sh.lru.Remove(k)
			sh.evictedIdle++
			return v
		}
		if best == nil || at < bestAt {
			bestKey, best, bestAt = k, v, at
		}
		sh.lru.Get(k) // second chance: move to the front
	}
	sh.lru.Remove(bestKey)
	sh.evictedLive++
	return best
}

// remove forgets key.
func (s *store[S]) remove(key string) error {
	if len(key) > s.maxKeyLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	sh.lru.Remove(h)
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
		sh.mu.Unlock()
	}
	return st
}
