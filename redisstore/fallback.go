package redisstore

import "sync/atomic"

// breaker decides, for a limiter with a fallback, whether a decision goes
// to Redis. After a failed round trip it sends every decision to the
// fallback for interval; then it lets exactly one decision probe Redis
// (the one that wins a compare-and-swap) and keeps the others local until
// that probe succeeds or the next interval ends. So an outage costs each
// instance one timed-out round trip per interval, not one per request.
type breaker struct {
	interval int64        // ns
	down     atomic.Int64 // local ns until which Redis is not tried; 0 = healthy
}

// tryRedis reports whether a decision at local time now should go to Redis.
func (b *breaker) tryRedis(now int64) bool {
	until := b.down.Load()
	if until == 0 {
		return true
	}
	if now < until {
		return false
	}
	return b.down.CompareAndSwap(until, now+b.interval)
}

// fail records a failed round trip at local time now.
func (b *breaker) fail(now int64) {
	u := now + b.interval
	if u == 0 {
		u = 1
	}
	b.down.Store(u)
}

// succeed records a successful round trip.
func (b *breaker) succeed() {
	if b.down.Load() != 0 {
		b.down.Store(0)
	}
}
