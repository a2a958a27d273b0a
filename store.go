package floodgate

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

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
	// WithForgetEvicted.
	EvictedLive uint64
	// Restored counts keys that were not tracked and started from a
	// remembered debt instead of a fresh state: clients coming back after
	// a live eviction, and, once the debt memory has overflowed (Merged),
	// new clients whose place in it is bound by debts merged there.
	Restored uint64
	// DebtCapacity is how many debts the debt memory holds, each in an
	// entry of its own (WithDebtMemory; 0 with WithForgetEvicted): its
	// words, one a debt rounded up under pressure, two a debt kept
	// exactly while half of them or fewer are taken. Up to about that
	// many live evictions of distinct keys whose debts still run, no key
	// is charged for another's debt. The memory is allocated by each
	// shard at its first live eviction.
	DebtCapacity int
	// Merged counts debts that found no entry of their own in the full
	// debt memory and were merged into a bound shared with the other keys
	// of their place in it: from then on, until that bound runs out, a key
	// with no debt of its own that hashes there starts limited — the
	// price of never forgetting a debt. A non-zero count means more keys
	// with live limits passed through the store than DebtCapacity allows:
	// MaxKeys is far too small for the traffic, or a key spray is under
	// way (see WithDebtMemory).
	Merged uint64
	// Forgotten counts debts dropped instead: every live eviction under
	// WithForgetEvicted, and under WithForgetOverflow each debt that
	// found no room. Each one let a client start again with a fresh limit.
	Forgotten uint64
}

// algorithm is what the store needs of an algorithm besides its
// decisions, which the algorithm makes itself on the state the store
// hands it (see run). An algorithm value holds the parameters of a rate
// (its limit, period, burst): each shard keeps the one its keys are
// decided under, so that a change of rate reaches a shard's keys, and
// the debts it remembers, all at once under its lock (see change).
type algorithm[S, A any] interface {
	// debt returns what st owes at now (see debt); it may bring st up to
	// date first. A state that owes nothing equals a fresh one.
	debt(st *S, now int64) debt
	// restore sets st, keeping the memory it holds, to the state of a
	// key that owes v at now: a fresh one if v does not owe. Now and
	// after any later decisions and refunds, the state allows no more
	// than the state v was taken from or, for a shared bound
	// (v.shared), any of the states whose debts were merged into it.
	restore(st *S, v debt, now int64)
	// convert sets st, a state under this algorithm's parameters at now,
	// to the state under to's that what it has used inherits (see
	// Inherit). It allows no more than the converted state of any state
	// that allows at least as much: a bound stays a bound.
	convert(st *S, to A, how Inherit, now int64)
}

// store is the bounded, sharded per-key state behind every in-memory
// limiter.
//
// Keys are not stored: each is hashed with a per-store random seed
// (hash/maphash) to a 64-bit value, 60 bits of which identify it in the
// store (the other 4 are the slot's flags, see slot). That makes every
// entry the same small size whatever the key, pins no request memory,
// and costs a hash instead of a string comparison. Two distinct keys
// share a limit only if those 60 bits collide: with k keys tracked the
// chance of any collision is about k²/2⁶¹ (4·10⁻⁵ for ten million keys),
// and because the seed is random an attacker cannot aim for one.
//
// Each shard keeps its keys in a table of buckets: a bucket is a mutex
// and bucketSlots slots (tag and state, 24 bytes for a token bucket or a
// sliding counter: 128 bytes, two cache lines), and a key lives in one
// of two buckets picked by its hash, the first if it has room
// (two-choice "cuckoo" hashing, see place). A table holds up to maxLoad
// of its slots, so nine keys in ten are in their first bucket: a
// decision hashes the key, loads the shard's table pointer (read-mostly,
// shared by every core), locks the key's bucket — the mutex is in the
// bucket's own cache lines, so it costs no extra cache miss and no line
// shared between cores — decides on the slot it finds there at the time
// read under the lock, and unlocks. The shard's mutex is taken only to add or drop keys (a miss),
// to grow the table, and for the rarer calls (Reset, a change of rate).
// The table grows from two buckets by one at a time up to stepBuckets,
// then by half again each time (see grow), to the size the shard needs
// to hold its share of MaxKeys, so that a table just grown is still 57 %
// full, where a doubling left it 43 % full, at twice the bytes a key of
// the table before it (BenchmarkDefaultStoreBytesPerKey sweeps the sizes
// a store grows by, BenchmarkDefaultStoreFewKeys the smallest).
// The table holds no pointer: the garbage collector never scans it,
// however many keys it holds.
//
// golang-lru's simplelru, made at the shard's first eviction, orders the
// table's pages (runs of buckets, up to maxPages of them) for eviction: eviction examines the buckets of the oldest
// page in turn, dropping the first key whose state equals a fresh one
// (nothing is lost), and sends the page to the front once it has
// examined all of its buckets. A hit marks its slot, in the line it has
// locked anyway; eviction gives a marked key a second chance (the CLOCK
// approximation of LRU). The LRU holds pages rather than keys because
// its entry and map slot alone cost more per key than a slot does.
//
// A key dropped while it still holds state leaves its debt in the
// shard's fixed-size debt memory (see debts), and comes back from it:
// bounded memory never lets a spray of keys reset a live limit, unless
// the limiter was built with WithForgetEvicted.
type store[S any, A algorithm[S, A]] struct {
	seed maphash.Seed
	// fixedSeed, with seedFixed, replaces seed in tests (withStoreSeed).
	fixedSeed uint64
	seedFixed bool
	shards    []shard[S, A]
	mask      uint64
	maxKeys   int
	maxKeyLen int
	clock     clock
	// debtsPerKey sizes each shard's debt memory; 0: WithForgetEvicted.
	debtsPerKey    int
	forgetOverflow bool
	// changeMu makes changes of rate one at a time (see change).
	changeMu sync.Mutex
	// total counts the keys of every shard, on a cache line of its own:
	// it is written by every insertion and eviction, never by a hit.
	total paddedCount
}

// paddedCount is a counter alone on its cache lines.
type paddedCount struct {
	_ [cacheLine]byte
	n atomic.Int64
	_ [cacheLine - 8]byte
}

// cacheLine is the size of a cache line on the machines Go runs on
// (128 on some ARM64 cores, which the pads then halve).
const cacheLine = 64

// shard is a part of the store, by hash: its table, and what the mutex
// guards. The fields up to mu are read by every decision, or set at
// construction, and written only when the table grows, the rate changes
// or the shard first evicts live; those from mu on are written by
// insertions. A shard of token buckets or sliding counters is 128 bytes,
// two cache lines, and wherever the allocator places the shards' array
// (on a line, or a word past one, after its header) no line holds
// fields of both kinds (TestShardLines): an insertion never writes a line
// that a decision on a tracked key reads, and no padding is needed
// (BenchmarkTokenBucketChurnParallel decides while keys come and go). The
// padding that did this before, a cache line between shards and on
// either side of their written fields, cost a store of 64 shards 12 KiB,
// and what only evictions use, allocated at a shard's first eviction
// now (see evictions), 4 KiB more: 15 bytes a key at 1,000 keys (issue
// 33).
type shard[S any, A algorithm[S, A]] struct {
	// tab is the table; nil until the shard's first key.
	tab atomic.Pointer[table[S]]
	// algs holds the parameters of the rates the shard's states are in:
	// a slot's state is in algs[1] if its tag has tagGen, algs[0] if not.
	// A change of rate writes the other one, then converts each bucket's
	// states under the bucket's lock, flipping their tagGen (see change).
	algs [2]A
	// clock is the store's.
	clock *clock
	// share is the shard's part of MaxKeys, which sizes its debt memory;
	// most is the keys its table holds at its final size: share and some
	// slack for the shards that random keys give more than their share
	// (see newStore). A shard given more than most while the store has
	// room grows its table beyond (see insert).
	share, most int
	// final is the number of buckets of a table that holds most keys.
	final uint64
	// debts is allocated at the shard's first live eviction, so that a
	// store sized for its traffic never pays for it; it stays nil with
	// WithForgetEvicted.
	debts *debts

	mu sync.Mutex
	// gen is the tagGen bit of the states in the current rate: the one a
	// new key takes. Read and written under mu.
	gen  uint64
	last int64 // latest time seen by the shard's slow path (see hold)
	keys int   // tracked now
	// rng picks the slots a full bucket moves out (xorshift, see place).
	rng uint64
	// ev is what eviction keeps: nil until the shard's first eviction.
	ev *evictions
	// scratch holds the state of an untracked key for a decision that
	// does not keep it (a report, a refund on a remembered debt).
	scratch S
}

// evictions is what a shard keeps once it has begun to evict: the
// eviction order of its table's pages and the counts of Stats. A store
// sized for its traffic never pays for it.
type evictions struct {
	// pages orders the table's pages, of 1<<pageShift buckets, for
	// eviction, oldest first; nil until the shard's first eviction by
	// evict (the pages are in their own order until then). hand is the
	// next bucket eviction examines in the oldest page.
	pages     *simplelru.LRU[uint32, struct{}]
	pageShift uint
	hand      uint64
	// misses counts evictions in a row that found no fresh key, up to 2
	// (see evictBuckets).
	misses                             int
	evictedIdle, evictedLive, restored uint64
	forgotten                          uint64
}

// evicting returns the shard's evictions, allocating them on first use:
// pages of as many buckets as it takes for a table of the shard's final
// size to have from maxPages/2 to maxPages of them. The shard must be
// locked.
func (sh *shard[S, A]) evicting() *evictions {
	if sh.ev == nil {
		sh.ev = &evictions{}
		for sh.final>>sh.ev.pageShift > maxPages {
			sh.ev.pageShift++
		}
	}
	return sh.ev
}

// minBuckets is the fewest buckets of a shard's final table: in fewer,
// two keys' pairs of buckets overlap so often that a few keys can fill
// both of theirs while the table has room (8 keys in 2 buckets failed to
// fit in 0.8 % of random placements). A smaller table on the way there
// grows when a key finds no room in it (see insert).
const minBuckets = 8

// maxLoad is the share of a table's slots it holds before it grows, and
// that a table sized to hold a shard's keys holds at most: with two
// buckets of bucketSlots slots to choose from, a key finds room, in its
// first bucket most of the time, without long chains of moves.
const maxLoad = 0.85

// slackSigmas is the slack, in standard deviations of a shard's share of
// random keys (a Poisson count, so the square root of the share), that a
// shard may hold beyond its share: up to that, a store of several shards
// holds MaxKeys keys without evicting any (see newStore).
const slackSigmas = 4

func newStore[S any, A algorithm[S, A]](c config, alg A) (*store[S, A], error) {
	if c.shards <= 0 || c.shards&(c.shards-1) != 0 || c.shards > c.maxKeys {
		return nil, fmt.Errorf("%w: %d shards for %d keys", ErrInvalidOption, c.shards, c.maxKeys)
	}
	s := &store[S, A]{
		seed:           maphash.MakeSeed(),
		fixedSeed:      c.storeSeed,
		seedFixed:      c.seedFixed,
		shards:         make([]shard[S, A], c.shards),
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
		sh.algs = [2]A{alg, alg}
		sh.clock = &s.clock
		sh.share = per
		if i < extra {
			sh.share++
		}
		// MaxKeys random keys give each shard a Poisson share: one shard
		// holds them all, several keep room for slackSigmas standard
		// deviations more each, which the bound on the total (store.total)
		// does not let them all use at once.
		sh.most = sh.share
		if c.shards > 1 {
			sh.most += int(slackSigmas*math.Sqrt(float64(sh.share))) + 1
		}
		sh.final = tableBuckets(sh.most)
		sh.rng = uint64(i)*0x9e3779b97f4a7c15 | 1
	}
	return s, nil
}

// tableBuckets returns the number of buckets of a table that holds n
// keys within maxLoad, less for a small table: m·2^k for an m of 8 to
// 15. A table of any size can grow to it (see nextBuckets); the rounding,
// up to an eighth more, keeps a full table's keys in their first bucket
// as often as before tables grew by half (issue 33), so that a store
// sized for its keys decides as fast. The table allocated may have a few
// more buckets (see newTable).
func tableBuckets(n int) uint64 {
	// A small table fills less: some of its buckets draw much more than
	// their share, and have fewer others to pass keys on to.
	need := uint64(math.Ceil((float64(n) + 2*math.Sqrt(float64(n))) / (bucketSlots * maxLoad)))
	need = max(need, minBuckets)
	k := uint(0)
	for need>>k >= 16 {
		k++
	}
	return (need + 1<<k - 1) >> k << k
}

// hash checks key's length and returns its identity in the store: its
// hash with the flag bits of a slot's tag cleared but tagUsed (see slot).
// Bits 4 and up pick the shard, the top bits the buckets.
func (s *store[S, A]) hash(key string) (uint64, error) {
	if len(key) > s.maxKeyLen {
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), s.maxKeyLen)
	}
	return s.sum(key)&^tagFlags | tagUsed, nil
}

// sum returns key's 64-bit hash under the store's seed.
func (s *store[S, A]) sum(key string) uint64 {
	if s.seedFixed {
		return fixedSum(s.fixedSeed, key)
	}
	return maphash.String(s.seed, key)
}

// fixedSum hashes key under a fixed seed (withStoreSeed, tests only), so
// that a test replays where its keys land: FNV-1a over the key from the
// seed, then a full avalanche of the 64 bits (splitmix64's finalizer),
// since the store reads its high bits and its low bits apart.
func fixedSum(seed uint64, key string) uint64 {
	h := seed ^ 0xcbf29ce484222325
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 0x100000001b3
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// shard returns the shard of h.
func (s *store[S, A]) shard(h uint64) *shard[S, A] { return &s.shards[h>>4&s.mask] }

// hold returns the time for the shard's slow path, under its mutex, from
// now read before it was taken (see clock.inside), held at the latest
// time the slow path has seen: the debt memory's times never go back.
// The shard must be locked.
func (sh *shard[S, A]) hold(now int64) int64 {
	now = sh.clock.inside(now)
	if now < sh.last {
		return sh.last
	}
	sh.last = now
	return now
}

// run calls f with the algorithm of key's state (the parameters of the
// rate it is in), the state and the current time, under the lock of the
// key's bucket. A key that is not tracked is inserted when create is
// true, starting from what the debt memory says it owes; otherwise f
// gets a scratch state built the same way, which is not kept. f must not
// keep st.
func (s *store[S, A]) run(key string, create bool, f func(alg A, st *S, now int64)) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.outside()
	if !sh.hit(h, now, f) {
		s.miss(sh, h, now, create, f)
	}
	return nil
}

// hit calls f on h's slot under its bucket's lock and reports true, or
// reports false if h is not in the table: most decisions end here,
// without the shard's mutex. A bucket of a table that has grown sends it
// to the new table; while a table's keys are moving into it, a key not
// found there is looked for in the table it grows from (see grow), and
// if the key's bucket there has moved since, in the new table once more.
func (sh *shard[S, A]) hit(h uint64, now int64, f func(alg A, st *S, now int64)) bool {
	again := true
	for {
		t := sh.tab.Load()
		if t == nil {
			return false
		}
		switch sh.lookup(t, h, now, f) {
		case bucketFound:
			return true
		case bucketMoved:
			continue
		}
		p := t.prev.Load()
		if p == nil {
			return false
		}
		switch sh.lookup(p, h, now, f) {
		case bucketFound:
			return true
		case bucketMoved:
			if again { // its keys are in t now
				again = false
				continue
			}
		}
		return false // the slow path looks under the shard's mutex
	}
}

// lookup decides on h in its buckets of t (see decide): bucketFound, or
// bucketMoved if either of them has moved, or bucketMissing.
func (sh *shard[S, A]) lookup(t *table[S], h uint64, now int64, f func(alg A, st *S, now int64)) int {
	r := sh.decide(&t.b[t.first(h)], h, now, f)
	if r == bucketFound {
		return r
	}
	if r2 := sh.decide(&t.b[t.second(h)], h, now, f); r2 != bucketMissing {
		return r2
	}
	return r
}

// What decide found in a bucket.
const (
	bucketMissing = iota
	bucketFound
	bucketMoved
)

// decide locks b and, if h is in it, marks its slot as used and calls f
// on its state, at the time read under the lock (see clock.inside).
func (sh *shard[S, A]) decide(b *bucket[S], h uint64, now int64, f func(alg A, st *S, now int64)) int {
	b.mu.Lock()
	for i := range b.slots {
		if sl := &b.slots[i]; sl.tag&^(tagMark|tagGen|tagSecond) == h {
			sl.tag |= tagMark
			f(sh.algs[sl.tag>>2&1], &sl.st, sh.clock.inside(now))
			b.mu.Unlock()
			return bucketFound
		}
	}
	moved := b.slots[0].tag == movedTag
	b.mu.Unlock()
	if moved {
		return bucketMoved
	}
	return bucketMissing
}

// miss is run's slow path, under the shard's mutex: the key may have
// been inserted since hit looked; if not, it is inserted (create) or
// decided on a scratch state, either restored from what the debt memory
// says it owes.
func (s *store[S, A]) miss(sh *shard[S, A], h uint64, now int64, create bool, f func(alg A, st *S, now int64)) {
	sh.mu.Lock()
	now = sh.hold(now)
	if b, i := sh.locate(h); b != nil {
		f(sh.algs[b.slots[i].tag>>2&1], &b.slots[i].st, sh.clock.inside(now))
		b.mu.Unlock()
		sh.mu.Unlock()
		return
	}
	if !create {
		sh.algs[sh.gen>>2].restore(&sh.scratch, sh.owed(h, now, false), now)
		f(sh.algs[sh.gen>>2], &sh.scratch, now)
		sh.mu.Unlock()
		return
	}
	b, i := s.insert(sh, h, now)
	alg := sh.algs[sh.gen>>2]
	v := sh.owed(h, now, true)
	alg.restore(&b.slots[i].st, v, now)
	if v.owes(now) {
		sh.evicting().restored++
	}
	f(alg, &b.slots[i].st, sh.clock.inside(now))
	b.mu.Unlock()
	sh.mu.Unlock()
}

// owed returns what the debt memory says h owes at now. A key that is
// tracked from now on (track) needs its entry no more, except as a
// shield from a shared bound (see debts.put). The shard must be locked.
func (sh *shard[S, A]) owed(h uint64, now int64, track bool) debt {
	if sh.debts == nil {
		return debt{}
	}
	f := sh.debts.find(h, now)
	v := f.owed(now)
	if track && f.own != nil && !f.rounded { // a rounded entry stays (see debts)
		sh.debts.put(h, debt{}, now)
	}
	return v
}

// refund calls f with key's state, to give units back. A key that is not
// tracked but owes a remembered debt gets the refund on that debt, which
// is remembered as it is afterwards: a refund is not lost because the key
// was evicted. A key that owes nothing is left alone.
func (s *store[S, A]) refund(key string, f func(alg A, st *S, now int64)) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.outside()
	if sh.hit(h, now, f) {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if b, i := sh.locate(h); b != nil {
		f(sh.algs[b.slots[i].tag>>2&1], &b.slots[i].st, sh.clock.inside(now))
		b.mu.Unlock()
		return nil
	}
	if sh.debts == nil {
		return nil
	}
	v := sh.debts.find(h, now).owed(now)
	if !v.owes(now) {
		return nil
	}
	alg := sh.algs[sh.gen>>2]
	alg.restore(&sh.scratch, v, now)
	f(alg, &sh.scratch, now)
	sh.debts.put(h, alg.debt(&sh.scratch, now), now)
	return nil
}

// reset forgets key and its remembered debt, for good (see debts.reset).
func (s *store[S, A]) reset(key string) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.outside()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if b, i := sh.locate(h); b != nil {
		s.remove(sh, b, i)
		b.mu.Unlock()
	}
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	return nil
}

// change moves every shard to alg, the parameters of a new rate: shard by
// shard under its mutex, every key the shard tracks is converted as how
// says under its bucket's lock, at its bucket's now, and from then on
// decided under alg; then every debt the shard remembers. A decision sees
// a key either before the change or after it, never halfway: it reads
// the rate a state is in from the state's own tag (see shard.algs).
// Shards not reached yet decide under the old rate a moment longer. The
// cost is one conversion per tracked key and per remembered debt; no
// bucket is held for longer than its own keys take. Changes are made one
// at a time, and publish (the limiter's record of its current rate) runs
// after the last shard, before the next change can begin.
func (s *store[S, A]) change(alg A, how Inherit, publish func()) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	defer publish()
	for i := range s.shards {
		sh := &s.shards[i]
		now := s.clock.outside()
		sh.mu.Lock()
		now = sh.hold(now)
		sh.change(alg, how, now)
		sh.mu.Unlock()
	}
}

// change converts the shard's keys and debts to alg at now (see
// store.change). The shard must be locked.
func (sh *shard[S, A]) change(alg A, how Inherit, now int64) {
	from, to := sh.gen, sh.gen^tagGen
	old := sh.algs[from>>2]
	sh.algs[to>>2] = alg
	if t := sh.tab.Load(); t != nil {
		for j := range t.b {
			b := &t.b[j]
			b.mu.Lock()
			bnow := sh.clock.inside(now)
			for i := range b.slots {
				if sl := &b.slots[i]; sl.tag&tagUsed != 0 {
					old.convert(&sl.st, alg, how, bnow)
					sl.tag = sl.tag&^tagGen | to
				}
			}
			b.mu.Unlock()
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
			old.restore(&sh.scratch, v, now)
			old.convert(&sh.scratch, alg, how, now)
			return alg.debt(&sh.scratch, now)
		}, now)
	}
	sh.gen = to
}

// take removes key from the store and returns its state, converted to
// alg as how says, at the key's now: the state it is tracked with, or
// the one its remembered debt restores to; ok is false when it owes
// nothing. The key is forgotten durably, as by reset. A PlanLimiter
// takes a key from the limiter of its old plan this way, to put it (put)
// into the limiter of its new one.
func (s *store[S, A]) take(key string, alg A, how Inherit) (st S, ok bool, err error) {
	h, err := s.hash(key)
	if err != nil {
		return st, false, err
	}
	sh, now := s.shard(h), s.clock.outside()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	cur := sh.algs[sh.gen>>2]
	if b, i := sh.locate(h); b != nil {
		now = sh.clock.inside(now)
		st = b.slots[i].st
		b.slots[i].st = *new(S) // st keeps the memory it holds (a log's entries)
		s.remove(sh, b, i)
		b.mu.Unlock()
	} else if sh.debts != nil {
		cur.restore(&st, sh.debts.find(h, now).owed(now), now)
	}
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	if !cur.debt(&st, now).owes(now) {
		return st, false, nil
	}
	cur.convert(&st, alg, how, now)
	return st, alg.debt(&st, now).owes(now), nil
}

// put makes st key's state, replacing whatever the store held for it,
// tracked or remembered. st must be in the units of the current
// algorithm of key's shard (see take).
func (s *store[S, A]) put(key string, st S) error {
	h, err := s.hash(key)
	if err != nil {
		return err
	}
	sh, now := s.shard(h), s.clock.outside()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if sh.debts != nil {
		sh.debts.reset(h, now)
	}
	b, i := sh.locate(h)
	if b == nil {
		b, i = s.insert(sh, h, now)
	}
	b.slots[i].st = st
	b.mu.Unlock()
	return nil
}

// owes reports whether key is tracked with state, or remembered owing.
func (s *store[S, A]) owes(key string) bool {
	h, err := s.hash(key)
	if err != nil {
		return false
	}
	sh, now := s.shard(h), s.clock.outside()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now = sh.hold(now)
	if b, i := sh.locate(h); b != nil {
		now = sh.clock.inside(now)
		owes := sh.algs[b.slots[i].tag>>2&1].debt(&b.slots[i].st, now).owes(now)
		b.mu.Unlock()
		return owes
	}
	return sh.debts != nil && sh.debts.find(h, now).owed(now).owes(now)
}

// algOf returns the current algorithm of key's shard, for a conversion
// into it (take); a key too long is refused by take or put anyway.
func (s *store[S, A]) algOf(key string) A {
	sh := s.shard(s.sum(key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.algs[sh.gen>>2]
}

// stats sums the shards' counters.
func (s *store[S, A]) stats() Stats {
	st := Stats{MaxKeys: s.maxKeys}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.keys
		if ev := sh.ev; ev != nil {
			st.EvictedIdle += ev.evictedIdle
			st.EvictedLive += ev.evictedLive
			st.Restored += ev.restored
			st.Forgotten += ev.forgotten
		}
		if sh.debts != nil {
			st.Merged += sh.debts.merged
			st.Forgotten += sh.debts.forgotten
		}
		sh.mu.Unlock()
		if s.debtsPerKey > 0 {
			st.DebtCapacity += debtBuckets(sh.share, s.debtsPerKey) * debtWords
		}
	}
	return st
}

// remember keeps the debt v of h, evicted live, in the shard's debt
// memory, allocating it on first use, or forgets it (WithForgetEvicted).
func (s *store[S, A]) remember(sh *shard[S, A], h uint64, v debt, now int64) {
	if s.debtsPerKey == 0 {
		sh.evicting().forgotten++
		return
	}
	if sh.debts == nil {
		sh.debts = newDebts(debtBuckets(sh.share, s.debtsPerKey), s.forgetOverflow, h)
	}
	sh.debts.put(h, v, now)
}

// debtBuckets returns the buckets of the debt memory of a shard of size
// keys: perKey words per key, and more only for a small shard. A spray
// of random keys gives each shard a Poisson share of the debts; a spray
// of eight times the bound fills the default memory to about seven
// eighths of its words (one per debt, rounded up under pressure: see
// debts), so the eighth left over covers three standard deviations of a
// shard's share once it has 576 words (72 keys at the default), and a
// smaller shard gets the difference. A memory of more than 32 KiB is
// allocated in whole pages of 8 KiB (Go's allocator rounds a large
// object up to them): it is rounded down to them, so that it costs no
// more than perKey words a key (a shard of 6,250 keys, in the default
// 100,000-key store, holds 7.86 words a key).
func debtBuckets(size, perKey int) int {
	n := size * perKey
	if slack := 3*math.Sqrt(float64(n)) - float64(n)/8; slack > 0 {
		n += int(slack) + 1
	}
	const page, large = 8 << 10 / (8 * debtWords), 32 << 10 / (8 * debtWords) // in buckets
	b := (n + debtWords - 1) / debtWords
	if b > large {
		b = b / page * page
	}
	return b
}
