package prommetrics

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"github.com/prometheus/client_golang/prometheus"
)

// The descriptors of the admission kinds' state (issue 30): the calls a
// gate holds for their turn, read from a floodgate.GateStats registered
// with WatchGate, and the slots of an in-flight limit registered with
// Watch or Limiter, read from its InFlightStats. All are read at scrape
// time, each at 0 from the first scrape.
var (
	waitingCallsDesc = prometheus.NewDesc("floodgate_waiting_calls",
		"Calls the gate holds for their turn now (floodgate.WithWait).", []string{"gate"}, nil)
	inFlightSlotsDesc = prometheus.NewDesc("floodgate_inflight_slots",
		"Slots of the in-flight limit held now (on Redis: by this instance's calls).", []string{"limiter"}, nil)
	inFlightMaxSlotsDesc = prometheus.NewDesc("floodgate_inflight_max_slots",
		"Slots a key (or, service-wide, the service) may hold at once: the in-flight limit's Max.", []string{"limiter"}, nil)
	inFlightLostLeasesDesc = prometheus.NewDesc("floodgate_redis_inflight_lost_leases_total",
		"Renewals of the Redis in-flight limit that found this instance's slots of a key gone while its calls still held them: the lease ran out first, and other instances may have taken them.",
		[]string{"limiter"}, nil)
)

// kindsDescs are the descriptors of this file, for Describe.
var kindsDescs = []*prometheus.Desc{waitingCallsDesc, inFlightSlotsDesc, inFlightMaxSlotsDesc, inFlightLostLeasesDesc}

// WatchGate registers s under name, so that each scrape reports the calls
// its gates hold for their turn (floodgate_waiting_calls{gate=name}), at
// 0 from the first scrape. Give s to the middleware or the interceptors
// with floodgate.WithGateStats (grpclimit.WithGateStats,
// connectlimit.WithGateStats). A nil s, a name that is not printable
// ASCII, or a name already registered with WatchGate, is an error; the
// error of a duplicate wraps ErrDuplicateName.
func (m *Metrics) WatchGate(name string, s *floodgate.GateStats) error {
	return m.gates.Add(name, s)
}

// collectKinds sends the gates' waiting calls and the in-flight limits'
// slots.
func (m *Metrics) collectKinds(ch chan<- prometheus.Metric) {
	for _, g := range m.gates.All() {
		ch <- prometheus.MustNewConstMetric(waitingCallsDesc, prometheus.GaugeValue, float64(g.Stats.Waiting()), g.Name)
	}
	for _, w := range m.limiters.All() {
		if w.InFlight == nil {
			continue
		}
		s := w.InFlight()
		ch <- prometheus.MustNewConstMetric(inFlightSlotsDesc, prometheus.GaugeValue, float64(s.Held), w.name)
		ch <- prometheus.MustNewConstMetric(inFlightMaxSlotsDesc, prometheus.GaugeValue, float64(s.Max), w.name)
		if s.Leased {
			ch <- prometheus.MustNewConstMetric(inFlightLostLeasesDesc, prometheus.CounterValue, float64(s.LostLeases), w.name)
		}
	}
}

// newGates returns the registry of WatchGate.
func newGates() *metricsbase.Gates[struct{}] {
	return metricsbase.NewGates(ErrDuplicateName, func(string) struct{} { return struct{}{} })
}
