package floodgate

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// This file holds the store's table (see store): its buckets and their
// locks, where a key is placed, how the table grows, and eviction.

// bucketSlots is the number of keys a bucket holds: five slots of 24
// bytes (a token bucket's or a sliding counter's) and the bucket's 8-byte
// mutex fill 128 bytes, two cache lines that the table's allocation (a
// large one, page-aligned) keeps aligned.
const bucketSlots = 5

// The flags in the low bits of a slot's tag; the other 60 bits are the
// key's identity (see store.hash).
const (
	// tagMark is set when the key is used, and cleared when eviction
	// passes it over: its second chance.
	tagMark = 1 << 0
	// tagUsed is set in every slot that holds a key: an empty slot's tag
	// is 0.
	tagUsed = 1 << 1
	// tagGen says which of its shard's two rates the state is in (see
	// shard.algs).
	tagGen = 1 << 2
	// tagSecond is set when the key is in its second bucket.
	tagSecond = 1 << 3
	tagFlags  = tagMark | tagUsed | tagGen | tagSecond
	// movedTag, in the first slot of a bucket of a table that has grown,
	// sends decisions to the new table (see grow). It is no key's tag:
	// tagUsed is clear.
	movedTag = tagMark
)

// slot is one tracked key: its tag (identity and flags) and state.
type slot[S any] struct {
	tag uint64
	st  S
}

// bucket is bucketSlots slots and the lock that guards them, in the
// bucket's own cache lines: a decision on a tracked key takes no other
// lock, and writes no line that a decision on another bucket reads.
type bucket[S any] struct {
	mu    sync.Mutex
	slots [bucketSlots]slot[S]
}

// outside returns the time a call reads before it takes a lock: an
// injected clock, which is user code, is read there, never under a lock;
// the system's monotonic clock is read under the lock instead (inside).
func (c *clock) outside() int64 {
	if c.now == nil {
		return 0
	}
	return c.nanos()
}

// inside returns the time to decide at under a bucket's (or a shard's)
// lock, from now read before it was taken (outside): never earlier than
// the time of a call that held the lock before, so that a state never
// sees time go back (two callers may read the clock in one order and lock
// in the other). The system's clock is read here; an injected one's
// latest reading (see clock.nanos) is at least that of every call that
// read it before this one took the lock.
func (c *clock) inside(now int64) int64 {
	if c.now == nil {
		return c.nanos()
	}
	return max(now, c.high.Load())
}

// table is a shard's buckets. A key's buckets are picked by the top bits
// of its identity and of a mix of it, scaled to the number of buckets,
// which may be any: a larger table keeps the order of the keys' ranges
// (see grownOrder).
type table[S any] struct {
	b  []bucket[S]
	nb uint64
	// full is the number of keys at which the shard grows the table.
	full int
	// prev is the table this one grows from while its keys move, nil
	// once they all have (see grow).
	prev atomic.Pointer[table[S]]
}

// maxPages bounds the pages of a shard's table, the unit golang-lru
// orders for eviction: a page is a run of buckets, as many as it takes
// for a table of the shard's final size to have from maxPages/2 to
// maxPages pages (see newStore), so that the LRU entries the garbage
// collector walks are a few thousand whatever the number of keys.
const maxPages = 16

// first and second return the indexes of the two buckets of the key whose
// identity, or tag, is h: the top 32 bits of h and of an odd multiple of
// h, scaled to the number of buckets. They may be the same bucket.
func (t *table[S]) first(h uint64) uint64 { return (h >> 32) * t.nb >> 32 }
func (t *table[S]) second(h uint64) uint64 {
	return (h &^ tagFlags * 0x9e3779b97f4a7c15 >> 32) * t.nb >> 32
}

// other returns the index of the bucket that is not the one the key of
// tag is in (the same bucket if both of its buckets are one).
func (t *table[S]) other(tag uint64) uint64 {
	if tag&tagSecond != 0 {
		return t.first(tag)
	}
	return t.second(tag)
}

// pages returns the number of pages of the table, of 1<<shift buckets.
func (t *table[S]) pages(shift uint) int { return int((t.nb + 1<<shift - 1) >> shift) }

// locate returns h's bucket, locked, and the index of its slot there, or
// a nil bucket. The shard must be locked, so that no key moves meanwhile.
func (sh *shard[S, A]) locate(h uint64) (*bucket[S], int) {
	t := sh.tab.Load()
	if t == nil {
		return nil, 0
	}
	for _, j := range [2]uint64{t.first(h), t.second(h)} {
		b := &t.b[j]
		b.mu.Lock()
		for i := range b.slots {
			if b.slots[i].tag&^(tagMark|tagGen|tagSecond) == h {
				return b, i
			}
		}
		b.mu.Unlock()
	}
	return nil, 0
}

// insert adds a slot for h, which is not tracked, not marked (a key used
// once, as a sprayed one is, is dropped before a key that came back),
// and returns it as locate does; the caller sets its state. The shard
// must be locked.
//
// The key first takes one of the store's MaxKeys places (reserve), or,
// when all are taken, the place of a key the shard drops (evict): the
// store's count never exceeds MaxKeys, whatever other shards insert
// meanwhile, and no key is dropped while the store has room. A shard
// that holds no key has none to drop, and takes a place beyond MaxKeys
// (documented at WithMaxKeys). The table grows when it is full, to its
// final size, and beyond it only for a key that found no room there
// while the store had some: a shard given more than its share of keys
// holds them rather than dropping one early.
func (s *store[S, A]) insert(sh *shard[S, A], h uint64, now int64) (*bucket[S], int) {
	fresh := s.reserve()
	if !fresh {
		if sh.keys > 0 {
			s.evict(sh, now) // its place passes to h
		} else {
			s.total.n.Add(1)
		}
	}
	if t := sh.tab.Load(); t == nil || sh.keys >= t.full && t.nb < sh.final {
		sh.grow()
	}
	b, i := s.place(sh, h, now, fresh)
	for b == nil { // no room, and the table can grow (see nextBuckets)
		sh.grow()
		b, i = s.place(sh, h, now, false)
	}
	b.slots[i].tag = h | sh.gen
	if t := sh.tab.Load(); b != &t.b[t.first(h)] {
		b.slots[i].tag |= tagSecond
	}
	sh.keys++
	return b, i
}

// reserve takes one of the store's MaxKeys places for a new key and
// reports true, or reports false if every one is taken. A compare-and-swap,
// so that two shards inserting at once cannot both take the last one.
func (s *store[S, A]) reserve() bool {
	for {
		n := s.total.n.Load()
		if n >= int64(s.maxKeys) {
			return false
		}
		if s.total.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// place returns a free slot for h, its bucket locked: in h's first
// bucket if it has one, else in its second, else in one of them once a
// key there has moved to its other bucket (along a path of up to
// moveDepth buckets, so that each key stays in one of its two). If no
// key can move, it returns a nil bucket while the table can still grow
// (below its final size, or beyond it when beyond says so: the store
// has room for h, see insert), and otherwise drops a key of h's first
// bucket (see drop).
func (s *store[S, A]) place(sh *shard[S, A], h uint64, now int64, beyond bool) (*bucket[S], int) {
	t := sh.tab.Load()
	b, i := sh.room(t, h)
	if i >= 0 {
		return b, i
	}
	if t.nb < sh.final || beyond {
		b.mu.Unlock()
		return nil, 0
	}
	return b, s.drop(sh, b, sh.clock.inside(now))
}

// room returns a free slot of t for h, its bucket locked, as place
// does, or -1 and h's first bucket, locked, if there is none. The shard
// must be locked.
func (sh *shard[S, A]) room(t *table[S], h uint64) (*bucket[S], int) {
	j1, j2 := t.first(h), t.second(h)
	b1 := &t.b[j1]
	b1.mu.Lock()
	if i := b1.free(); i >= 0 {
		return b1, i
	}
	if j2 != j1 {
		b2 := &t.b[j2]
		b2.mu.Lock()
		if i := b2.free(); i >= 0 {
			b1.mu.Unlock()
			return b2, i
		}
		path := [moveDepth + 2]uint64{j1, j2}
		if i := sh.move(t, j1, path[:2], moveDepth); i >= 0 {
			b2.mu.Unlock()
			return b1, i
		}
		if i := sh.move(t, j2, path[:2], moveDepth); i >= 0 {
			b1.mu.Unlock()
			return b2, i
		}
		b2.mu.Unlock()
	} else {
		path := [moveDepth + 2]uint64{j1}
		if i := sh.move(t, j1, path[:1], moveDepth); i >= 0 {
			return b1, i
		}
	}
	return b1, -1
}

// moveDepth bounds the chain of keys place moves to make room: at a
// table's load (maxLoad), a key of a full bucket almost always finds room
// in its other bucket, or one move further.
const moveDepth = 3

// move makes room in bucket j of t, full and locked, by moving one of its
// keys to its other bucket, after making room there the same way if
// depth allows, and returns the freed slot, or -1. path holds the buckets
// locked by the caller, which no move goes through. The shard must be
// locked.
func (sh *shard[S, A]) move(t *table[S], j uint64, path []uint64, depth int) int {
	b := &t.b[j]
	sh.rng ^= sh.rng << 13
	sh.rng ^= sh.rng >> 7
	sh.rng ^= sh.rng << 17
	start := int(sh.rng>>33) % bucketSlots
	// Keys in their second bucket first: moved, they are back in their
	// first, where a decision looks first.
	for n := range 2 * bucketSlots {
		i := (start + n) % bucketSlots
		if second := b.slots[i].tag&tagSecond != 0; second != (n < bucketSlots) {
			continue
		}
		o := t.other(b.slots[i].tag)
		if onPath(path, o) {
			continue
		}
		ob := &t.b[o]
		ob.mu.Lock()
		k := ob.free()
		if k < 0 && depth > 1 {
			k = sh.move(t, o, append(path, o), depth-1)
		}
		if k >= 0 {
			ob.slots[k] = b.slots[i]
			ob.slots[k].tag ^= tagSecond
			b.slots[i] = slot[S]{} // the state's memory (a log's entries) went with it
			ob.mu.Unlock()
			return i
		}
		ob.mu.Unlock()
	}
	return -1
}

func onPath(path []uint64, j uint64) bool {
	for _, p := range path {
		if p == j {
			return true
		}
	}
	return false
}

// free returns the index of an empty slot of b, or -1.
func (b *bucket[S]) free() int {
	for i := range b.slots {
		if b.slots[i].tag == 0 {
			return i
		}
	}
	return -1
}

// remove empties slot i of b, which the caller has locked, and gives
// its place in the store back. The state is left as it is: a sliding
// log's entries are reused by the next key.
func (s *store[S, A]) remove(sh *shard[S, A], b *bucket[S], i int) {
	sh.unlink(b, i)
	s.total.n.Add(-1)
}

// unlink empties slot i of b, which the caller has locked, keeping its
// place in the store for the key that an eviction makes room for (see
// insert).
func (sh *shard[S, A]) unlink(b *bucket[S], i int) {
	b.slots[i].tag = 0
	sh.keys--
}

// drop empties a slot of b, full and locked, at now: the first whose
// state equals a fresh one, else the unmarked one that would be fresh
// soonest (any if all are marked), whose debt is remembered. It serves
// place when neither of a key's buckets has room and no key can move,
// which at a table's load is rare.
func (s *store[S, A]) drop(sh *shard[S, A], b *bucket[S], now int64) int {
	var best victim[S]
	for i := range b.slots {
		if sh.consider(b, i, now, &best) {
			s.remove(sh, b, i)
			sh.evicting().evictedIdle++
			return i
		}
	}
	s.evictLive(sh, &best, now)
	s.total.n.Add(-1) // the key placed here has a place of its own
	return best.i
}

// victim is the key eviction drops if it finds no fresh one.
type victim[S any] struct {
	b      *bucket[S]
	i      int
	v      debt
	marked bool
	ok     bool
}

// consider reports whether slot i of b, locked, holds a key whose state
// equals a fresh one at now; otherwise it clears the key's mark and keeps
// it as best if it is the better live victim: not marked before one that
// is, then the one that would become fresh soonest.
func (sh *shard[S, A]) consider(b *bucket[S], i int, now int64, best *victim[S]) bool {
	sl := &b.slots[i]
	if sl.tag&tagUsed == 0 {
		return false
	}
	v := sh.algs[sl.tag>>2&1].debt(&sl.st, now)
	if !v.owes(now) {
		return true
	}
	marked := sl.tag&tagMark != 0
	sl.tag &^= tagMark
	if !best.ok || best.marked && !marked || best.marked == marked && v.at < best.v.at {
		*best = victim[S]{b: b, i: i, v: v, marked: marked, ok: true}
	}
	return false
}

// evictLive drops best, in its bucket which the caller has locked, and
// remembers its debt. The key's place in the store is kept (see unlink).
func (s *store[S, A]) evictLive(sh *shard[S, A], best *victim[S], now int64) {
	sl := &best.b.slots[best.i]
	h := sl.tag&^(tagMark|tagGen|tagSecond) | tagUsed
	v := sh.algs[sl.tag>>2&1].debt(&sl.st, now)
	sh.unlink(best.b, best.i)
	ev := sh.evicting()
	ev.evictedLive++
	ev.misses = min(ev.misses+1, 2)
	s.remember(sh, h, v, now)
}

// evictBuckets is how many buckets, from the eviction hand on, an insert
// into a full shard examines for a key it can drop losslessly, by the
// number of evictions in a row that found none (see shard.misses): many
// while evictions find idle keys, since one that finds none then is
// probably unlucky, and few during a spray of live keys, where every
// examination is in vain. 64 buckets are some 270 keys at a full table's
// load.
var evictBuckets = [...]int{64, 8, 2}

// evict drops one key of the shard, at now. It examines the buckets of
// the oldest page from the hand on, up to evictBuckets of them (more if
// they hold no key at all): the first key whose state equals a fresh one
// is dropped at no cost. The others lose their mark (their second
// chance); a page whose every bucket has been examined goes to the front
// of the LRU. If none was fresh, the key that would have become fresh
// soonest among those not marked (among all, if every one was) is
// dropped: a live eviction, whose debt is remembered. The shard must be
// locked and hold a key.
func (s *store[S, A]) evict(sh *shard[S, A], now int64) {
	t, ev := sh.tab.Load(), sh.evicting()
	if ev.pages == nil { // the shard's first eviction here
		ev.pages = newPages(t.pages(ev.pageShift), nil)
	}
	var best victim[S]
	budget := min(evictBuckets[ev.misses], int(t.nb)) // no bucket twice
	for n := 0; n < budget || !best.ok; n++ {
		p, _, _ := ev.pages.GetOldest()
		j := uint64(p)<<ev.pageShift + ev.hand
		if ev.hand++; ev.hand == 1<<ev.pageShift || j+1 == t.nb {
			ev.hand = 0
			ev.pages.Get(p) // examined: to the front
		}
		b := &t.b[j]
		b.mu.Lock()
		bnow := sh.clock.inside(now)
		for i := range b.slots {
			if sh.consider(b, i, bnow, &best) {
				sh.unlink(b, i) // its place passes to the key inserted
				b.mu.Unlock()
				ev.evictedIdle++
				ev.misses = 0
				return
			}
		}
		b.mu.Unlock()
	}
	// The victim's state may have changed since it was examined (a hit
	// needs no shard lock), but not its slot: its debt is taken anew.
	best.b.mu.Lock()
	s.evictLive(sh, &best, sh.clock.inside(now))
	best.b.mu.Unlock()
}

// grow makes the shard's first table, a few buckets, or moves its keys
// into a larger one: one bucket more while it is small, then half as
// large again (see nextBuckets), so that a table just grown is at least
// two thirds as full as it was, never half. The new
// table is published at once, its old one kept as its prev, and each old
// bucket in turn is locked, its keys are placed in the new table as an
// insertion places a key (see room), and it is emptied, marked moved (a
// decision that finds the mark goes to the new table) and unlocked. A
// decision that does not find its key in the new table looks in the old
// one: it waits for one bucket's move at most, never for the table's.
// Should a key find no room in the new table (its buckets and the keys
// they could pass on are full), every key moves at once instead (see
// regrow). The pages' order in the LRU is kept (see grownOrder). The
// shard must be locked.
func (sh *shard[S, A]) grow() {
	old := sh.tab.Load()
	if old == nil {
		sh.tab.Store(newTable[S](min(firstBuckets, sh.final), sh.final, sh.most))
		return
	}
	t := newTable[S](nextBuckets(old.nb, sh.final), sh.final, sh.most)
	t.prev.Store(old)
	sh.tab.Store(t)
	for j := range old.b {
		ob := &old.b[j]
		ob.mu.Lock()
		for i := range ob.slots {
			sl := &ob.slots[i]
			if sl.tag&tagUsed == 0 {
				continue
			}
			b, k := sh.room(t, sl.tag)
			if k < 0 {
				b.mu.Unlock()
				t = sh.regrow(old, j, t)
				sh.grown(old, t)
				return
			}
			b.slots[k] = *sl
			if b.slots[k].tag &^= tagSecond; b != &t.b[t.first(sl.tag)] {
				b.slots[k].tag |= tagSecond
			}
			b.mu.Unlock()
			*sl = slot[S]{} // the state's memory (a log's entries) went with it
		}
		ob.slots = [bucketSlots]slot[S]{} // the memory of emptied slots too
		ob.slots[0].tag = movedTag
		ob.mu.Unlock()
	}
	t.prev.Store(nil)
	sh.grown(old, t)
}

// grown sets the eviction order of the pages of t, grown from old.
func (sh *shard[S, A]) grown(old, t *table[S]) {
	if ev := sh.ev; ev != nil && ev.pages != nil {
		order := grownOrder(ev.pages.Keys(), old.nb, t.nb, ev.pageShift)
		ev.pages = newPages(t.pages(ev.pageShift), order)
		ev.hand = 0
	}
}

// regrow moves every key of t, and of the buckets of old from j on (t's
// prev, whose bucket j the caller has locked), into a table larger than
// t, and returns it. The buckets of both are locked, the keys are placed
// into a table no decision sees yet (see rebuild), the new table is
// published, and the buckets are emptied, marked moved and unlocked.
// It serves grow when a key finds no room in t, which at the load of a
// table just grown is all but impossible. The shard must be locked.
func (sh *shard[S, A]) regrow(old *table[S], j int, t *table[S]) *table[S] {
	nb := nextBuckets(t.nb, sh.final)
	t2 := newTable[S](nb, sh.final, sh.most)
	from := [][]bucket[S]{t.b, old.b[j:]}
	for k := range t.b {
		t.b[k].mu.Lock()
	}
	for k := j + 1; k < len(old.b); k++ {
		old.b[k].mu.Lock()
	}
	for !sh.rebuild(from, t2) {
		nb = nextBuckets(nb, sh.final)
		t2 = newTable[S](nb, sh.final, sh.most)
	}
	sh.tab.Store(t2)
	for _, bs := range from {
		for k := range bs {
			bs[k].slots = [bucketSlots]slot[S]{}
			bs[k].slots[0].tag = movedTag
			bs[k].mu.Unlock()
		}
	}
	t.prev.Store(nil)
	return t2
}

// firstBuckets is the size of a shard's first table: small, so that a
// store of many shards holding few keys costs little (a store of 64
// shards, 16 KiB); a table grows on demand from it. (A first table of
// one bucket would save half of that, 8 KiB, in a default store of 100
// keys or fewer, and nothing from 1,000 keys; it would change where the
// keys of every store of a fixed seed land, and so the histories its
// tests replay.)
const firstBuckets = 2

// stepBuckets is the size below which a table grows by one bucket at a
// time: a small table's keys are few to move, and growing by half again
// there left the tables of a default store holding 1,000 keys (about 16
// a shard, in tables of 3 to 6 buckets) 29 % empty, where steps of one
// leave them 24 % empty, and 10,000 keys 34 % against 27 % (issue 33;
// 20 stores each, the same at 100,000 keys: 20 %).
const stepBuckets = 8

// nextBuckets returns the size of the table that replaces one of nb
// buckets: one more below stepBuckets, then half as large again (at a
// table's load, maxLoad, the new one is 57 % full), up to the shard's
// final size, and beyond it, for a shard that holds more than its share
// (see insert), by half again.
func nextBuckets(nb, final uint64) uint64 {
	next := nb + nb/2
	if nb < stepBuckets {
		next = nb + 1
	}
	if nb < final {
		next = min(next, final)
	}
	return next
}

// rebuild puts the keys of the buckets from, which the caller has
// locked, into t, an empty table, and reports whether each found room
// (if not, a larger table is tried). Each key goes to its first bucket if
// it has room, else to its second (see put). t is the caller's alone: no
// bucket's lock is taken.
func (sh *shard[S, A]) rebuild(from [][]bucket[S], t *table[S]) bool {
	for _, bs := range from {
		for j := range bs {
			for _, sl := range bs[j].slots {
				if sl.tag&tagUsed != 0 && !sh.put(t, sl) {
					return false
				}
			}
		}
	}
	return true
}

// growKicks bounds the keys put moves for one key: at the load of a table
// just grown, a key almost always finds room in one of its two buckets.
const growKicks = 64

// put places sl in t, a table no other goroutine sees (see rebuild): in
// its first bucket if it has room, else in its second, else in place of
// a key of its second bucket picked at random, which goes to its own
// other bucket the same way, up to growKicks keys; it reports false if the
// last key moved found no room, leaving t to be dropped.
func (sh *shard[S, A]) put(t *table[S], sl slot[S]) bool {
	sl.tag &^= tagSecond
	j := t.first(sl.tag)
	if i := t.b[j].free(); i >= 0 {
		t.b[j].slots[i] = sl
		return true
	}
	for range growKicks {
		j = t.other(sl.tag)
		if sl.tag &^= tagSecond; j != t.first(sl.tag) {
			sl.tag |= tagSecond
		}
		b := &t.b[j]
		if i := b.free(); i >= 0 {
			b.slots[i] = sl
			return true
		}
		sh.rng ^= sh.rng << 13
		sh.rng ^= sh.rng >> 7
		sh.rng ^= sh.rng << 17
		i := int(sh.rng>>33) % bucketSlots
		sl, b.slots[i] = b.slots[i], sl
	}
	return false
}

// newTable returns a table of nb buckets, or a few more: as many as the
// allocation holds (Go rounds an allocation up to a size class, or to
// whole 8 KiB pages above 32 KiB), for a shard whose tables grow to final
// buckets and hold at most most keys there.
func newTable[S any](nb, final uint64, most int) *table[S] {
	// append rounds its allocation up and the slice's capacity with it;
	// appending a make is compiled to a cleared extension, not a copy.
	b := append([]bucket[S](nil), make([]bucket[S], nb)...)
	b = b[:cap(b)]
	nb = uint64(len(b))
	t := &table[S]{b: b, nb: nb, full: int(float64(nb*bucketSlots) * maxLoad)}
	if nb >= final {
		t.full = most
	}
	return t
}

// newPages returns the LRU of a table of n pages, in order (oldest
// first), or every page in index order.
func newPages(n int, order []uint32) *simplelru.LRU[uint32, struct{}] {
	lru, err := simplelru.NewLRU[uint32, struct{}](n, nil)
	if err != nil {
		panic(err) // n > 0 always
	}
	if order == nil {
		for p := range n {
			lru.Add(uint32(p), struct{}{})
		}
		return lru
	}
	for _, p := range order {
		lru.Add(p, struct{}{})
	}
	return lru
}

// grownOrder returns the eviction order of the pages of a table of nb
// buckets grown from one of oldNb, whose pages were in order (oldest
// first): each new page takes the place of the old page its first bucket
// was in (the keys of a range of buckets stay in the same range, scaled).
func grownOrder(order []uint32, oldNb, nb uint64, shift uint) []uint32 {
	n := (nb + 1<<shift - 1) >> shift
	from := make([][]uint32, (oldNb+1<<shift-1)>>shift)
	for q := range n {
		p := (q << shift) * oldNb / nb >> shift
		from[p] = append(from[p], uint32(q))
	}
	grown := make([]uint32, 0, n)
	for _, p := range order {
		grown = append(grown, from[p]...)
	}
	return grown
}
