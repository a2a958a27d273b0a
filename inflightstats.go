package floodgate

// InFlightStats describes the slots an in-flight limit holds now, for
// metrics: floodgate.InFlight's and redisstore.InFlight's
// InFlightStats method returns it, and the metrics adapters' Watch
// reports it.
type InFlightStats struct {
	// Held is the slots held now: by every key (per key) or by the
	// service (service-wide); on Redis, by this instance's calls.
	Held int
	// Max is the limit's Max: the slots a key (or the service) may hold.
	Max int
	// Leased reports that the slots are leases on Redis, renewed while
	// held (redisstore.InFlight): LostLeases counts then.
	Leased bool
	// LostLeases counts the renewals that found this instance's slots of
	// a key gone while its calls still held them (see
	// redisstore.InFlight.LostLeases); always 0 in memory.
	LostLeases uint64
}

// InFlightStats reports the slots held now. It takes each shard's lock in
// turn (per key), so it costs O(keys holding slots): for a scrape, not
// for the request path.
func (l *InFlight) InFlightStats() InFlightStats {
	s := InFlightStats{Max: l.max}
	if l.serviceWide {
		s.Held = int(l.total.Load())
		return s
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for _, n := range sh.held {
			s.Held += int(n)
		}
		sh.mu.Unlock()
	}
	return s
}
