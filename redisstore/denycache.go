package redisstore

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// denyCache remembers, per client key, a denial Redis gave and until when
// it holds, so that a flooding client is answered in process.
//
// Why that is sound: RetryAfter is the earliest time at which the same
// request fits if nobody else consumes meanwhile. For each algorithm here
// the state only moves away from "fits" when others consume (a later
// theoretical arrival time, more events in the log, a higher count) and
// moves towards it only as time passes (tokens refill, events age out, the
// previous window's weight falls). So before RetryAfter has passed, Redis
// would deny the same request whatever other instances do — except after a
// Reset or a refund, which move the state towards "fits" at once. This
// process clears its entry on its own Reset and refunds; another
// instance's cannot reach it, so an entry answers for at most
// DenyCacheMaxAge, and then the request goes to Redis again: that bounds
// how long a reset or refunded client can be denied by a stale entry. The
// entry starts at the local time read before the request was sent, so it
// never outlives the true RetryAfter either.
//
// Clearing the entry is not enough for this process's own Reset or
// refund: a denial Redis made before the undo ran may come back after
// the entry was dropped, and one made while the undo was on its way may
// be stored before the undo lands. So each key has a generation (shared
// by the keys that hash alike: see denyGens), which an undo bumps, and
// drops the entry with, under the shard's lock, once its round trip is
// over, whatever came of it; a decision reads the generation before it
// sends its request, and its denial is stored only if the generation is
// the same when it takes the lock to store it. A denial whose round trip
// overlapped an undo is then never cached; one made wholly after it is.
// A lost store costs a round trip, never a wrong answer: Redis decides.
// An undo that failed (a timeout) may still run on the server later,
// unseen: its key is then as stale as after another instance's undo.
//
// A change of rate (SetRate on any instance) breaks it too: an upgrade
// lets the request in at once. So an entry is kept with the version of
// the rate it was denied under, and answers only while the limiter
// decides under that version and has read the rate record within its
// refresh interval (WithRateRefresh); otherwise the request goes to
// Redis, which reads the record first. SetRate returns one refresh
// interval after it wrote the record, so from then on no instance answers
// from a denial made under the old rate.
//
// And since a hit cannot know whether another instance reset or refunded
// the key meanwhile, its RetryAfter is never longer than what is left of
// the entry's own age: the wait after which this cache asks Redis again,
// not the denial's full wait, which only Redis can give.
//
// An entry answers only requests of the same cost: a cheaper one may fit
// sooner. The cache is sharded, each shard a bounded LRU behind its own
// mutex; dropping an entry only costs a round trip.
type denyCache struct {
	seed   maphash.Seed
	shards []denyShard
	mask   uint64
}

type denyShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, denyEntry]
	// gens are the generations of the shard's keys, a key's at
	// gens[hash>>32 % denyGens]: bumped under mu (forget), read without
	// it before a round trip (ticket) and under it to store (store).
	// Outside the LRU, so that an eviction does not lose them.
	gens [denyGens]atomic.Uint64
}

// denyTicket is what a decision holds of its key's place in the cache,
// from before its round trip to the store of its denial.
type denyTicket struct {
	hash uint64 // the key's: its shard and generation
	gen  uint64 // the key's generation before the round trip
	now  int64  // local ns, read before the round trip
}

type denyEntry struct {
	ver       int64 // the version of the rate the denial was given under
	n         int
	until     int64 // local ns at which the request fits
	expires   int64 // local ns after which the entry answers no more
	resetAt   int64 // local ns at which the key is back to its full quota
	remaining int
}

const denyShards = 16

// denyGens is the number of generations per shard (512 for the 16
// shards, 4 KiB in all): an undo of one key drops the stores of the keys
// in flight that share its generation, about one in 512, each a round
// trip later.
const denyGens = 32

func newDenyCache(maxKeys int) *denyCache {
	n := denyShards
	for n > 1 && n > maxKeys {
		n /= 2
	}
	c := &denyCache{seed: maphash.MakeSeed(), shards: make([]denyShard, n), mask: uint64(n - 1)}
	per, extra := maxKeys/n, maxKeys%n
	for i := range c.shards {
		size := per
		if i < extra {
			size++
		}
		// NewLRU fails only for a size below one, which per >= 1 rules out.
		c.shards[i].lru, _ = simplelru.NewLRU[string, denyEntry](size, nil)
	}
	return c
}

func (c *denyCache) shard(hash uint64) *denyShard {
	return &c.shards[hash&c.mask]
}

// gen returns the generation of the keys of hash in sh.
func (sh *denyShard) gen(hash uint64) *atomic.Uint64 {
	return &sh.gens[(hash>>32)%denyGens]
}

// ticket returns key's ticket at local time now, to be taken before the
// decision's round trip is sent.
func (c *denyCache) ticket(key string, now int64) denyTicket {
	h := maphash.String(c.seed, key)
	return denyTicket{hash: h, gen: c.shard(h).gen(h).Load(), now: now}
}

// lookup returns the cached denial of a request of cost n for key (its
// ticket tk) at the ticket's time, if one given under rate version ver
// still holds. Its RetryAfter is held to the entry's age left (see
// denyCache).
func (c *denyCache) lookup(key string, tk denyTicket, n int, ver int64, limit int) (floodgate.Decision, bool) {
	now := tk.now
	sh := c.shard(tk.hash)
	sh.mu.Lock()
	e, ok := sh.lru.Get(key)
	if ok && now >= e.expires {
		sh.lru.Remove(key)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || e.n != n || e.ver != ver {
		return floodgate.Decision{}, false
	}
	d := floodgate.Decision{
		Limit:      limit,
		Remaining:  e.remaining,
		RetryAfter: time.Duration(min(e.until, e.expires) - now),
	}
	if e.resetAt > now {
		d.ResetAfter = time.Duration(e.resetAt - now)
	}
	return d, true
}

// store caches a denial d that Redis gave for a request of cost n sent
// at the time of its ticket tk, under rate version ver, unless an undo of
// key's generation came since tk was taken.
func (c *denyCache) store(key string, tk denyTicket, n int, ver int64, d floodgate.Decision) {
	if d.RetryAfter <= 0 {
		return
	}
	now := tk.now
	e := denyEntry{
		ver:       ver,
		n:         n,
		until:     now + int64(d.RetryAfter),
		expires:   now + int64(min(d.RetryAfter, DenyCacheMaxAge)),
		resetAt:   now + int64(d.ResetAfter),
		remaining: d.Remaining,
	}
	// Clone: the key may be a slice of a request's memory.
	key = strings.Clone(key)
	sh := c.shard(tk.hash)
	sh.mu.Lock()
	if sh.gen(tk.hash).Load() == tk.gen {
		sh.lru.Add(key, e)
	}
	sh.mu.Unlock()
}

// remove forgets key: its state moved away from "fits" (it was allowed),
// or a denial may not say what a caller asks.
func (c *denyCache) remove(key string) {
	sh := c.shard(maphash.String(c.seed, key))
	sh.mu.Lock()
	sh.lru.Remove(key)
	sh.mu.Unlock()
}

// forget forgets key after an undo of this process (a Reset, a refund, a
// charge), once its round trip is over: it drops the entry, and every
// denial whose round trip began before (see denyCache).
func (c *denyCache) forget(key string) {
	h := maphash.String(c.seed, key)
	sh := c.shard(h)
	sh.mu.Lock()
	sh.gen(h).Add(1)
	sh.lru.Remove(key)
	sh.mu.Unlock()
}

// clear forgets every key: the denials were made under a rate that has
// changed.
func (c *denyCache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.lru.Purge()
		sh.mu.Unlock()
	}
}
