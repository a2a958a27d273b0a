package redisstore

import "github.com/floodgate-go/floodgate"

// InFlightStats reports the slots this instance's calls hold now, and the
// leases it lost (LostLeases), for the metrics adapters' Watch: what this
// instance knows, read under its lock with no round trip (O(calls held)).
// Every instance's Held added up is what Redis holds, give or take the
// slots of decisions in flight; the slots of a call whose lease ran out
// (lost) are not counted, as Redis no longer counts them, from the
// renewal that finds them gone (until then they count, so Held may
// exceed Max for a while after this instance stopped renewing: the
// renewals come a third of a lease apart).
func (l *InFlight) InFlightStats() floodgate.InFlightStats {
	s := floodgate.InFlightStats{Max: l.max, Leased: true, LostLeases: l.LostLeases()}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.held {
		for _, c := range e.calls {
			if !c.lost { // a lost one's lease ran out: Redis no longer counts it
				s.Held += c.n
			}
		}
	}
	return s
}
