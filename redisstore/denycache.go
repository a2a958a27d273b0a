package redisstore

import (
	"hash/maphash"
	"strings"
	"sync"
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

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)&c.mask]
}

// lookup returns the cached denial of a request of cost n for key at local
// time now, if one given under rate version ver still holds. Its
// RetryAfter is held to the entry's age left (see denyCache).
func (c *denyCache) lookup(key string, n int, now, ver int64, limit int) (floodgate.Decision, bool) {
	sh := c.shard(key)
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

// store caches a denial that Redis gave for a request sent at local time
// now, under rate version ver.
func (c *denyCache) store(key string, n int, now, ver int64, d floodgate.Decision) {
	if d.RetryAfter <= 0 {
		return
	}
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
	sh := c.shard(key)
	sh.mu.Lock()
	sh.lru.Add(key, e)
	sh.mu.Unlock()
}

// remove forgets key.
func (c *denyCache) remove(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
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
