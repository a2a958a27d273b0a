package redisstore

// RenewNow renews key's lease at once, as the renewal timer does, for
// tests on a fake clock (the timer runs on real time).
func (l *InFlight) RenewNow(key string) { l.renew(key, true) }

// EndLeaseNow does for key what the timer does when a lease ends, for
// tests on a fake clock (the timer runs only on the server's clock).
func (sc *SlidingCounter) EndLeaseNow(key string) {
	sh := sc.lease.shard(key)
	sh.mu.Lock()
	e, ok := sh.lru.Peek(key)
	sh.mu.Unlock()
	if ok {
		sc.endLease(key, e)
	}
}
