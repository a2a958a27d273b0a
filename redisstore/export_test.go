package redisstore

// RenewNow renews key's lease at once, as the renewal timer does, for
// tests on a fake clock (the timer runs on real time).
func (l *InFlight) RenewNow(key string) { l.renew(key, true) }
