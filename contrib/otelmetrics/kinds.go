package otelmetrics

import (
	"errors"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// GateKey names a gate registered with WatchGate.
const GateKey = attribute.Key("floodgate.gate")

// kindsInstruments report the admission kinds' state (issue 30): the
// calls a gate holds for their turn, read from a floodgate.GateStats
// registered with WatchGate, and the slots of an in-flight limit
// registered with Watch or Limiter, read from its InFlightStats, when
// the SDK collects, each at 0 from the first collection.
type kindsInstruments struct {
	waiting, slots, maxSlots metric.Int64ObservableUpDownCounter
	lostLeases               metric.Int64ObservableCounter
}

// newKindsInstruments creates the instruments from meter.
func newKindsInstruments(meter metric.Meter) (kindsInstruments, error) {
	var ki kindsInstruments
	var e1, e2, e3, e4 error
	ki.waiting, e1 = meter.Int64ObservableUpDownCounter("floodgate.waiting_call.count", metric.WithUnit("{call}"),
		metric.WithDescription("Calls the gate holds for their turn now (floodgate.WithWait)."))
	ki.slots, e2 = meter.Int64ObservableUpDownCounter("floodgate.inflight.slot.count", metric.WithUnit("{slot}"),
		metric.WithDescription("Slots of the in-flight limit held now (on Redis: by this instance's calls)."))
	ki.maxSlots, e3 = meter.Int64ObservableUpDownCounter("floodgate.inflight.slot.limit", metric.WithUnit("{slot}"),
		metric.WithDescription("Slots a key (or, service-wide, the service) may hold at once: the in-flight limit's Max."))
	ki.lostLeases, e4 = meter.Int64ObservableCounter("floodgate.redis.inflight.lost_leases", metric.WithUnit("{lease}"),
		metric.WithDescription("Renewals of the Redis in-flight limit that found this instance's slots of a key gone while its calls still held them: the lease ran out first, and other instances may have taken them."))
	return ki, errors.Join(e1, e2, e3, e4)
}

// all returns the instruments, for the callback's registration.
func (ki *kindsInstruments) all() []metric.Observable {
	return []metric.Observable{ki.waiting, ki.slots, ki.maxSlots, ki.lostLeases}
}

// WatchGate registers s under name, so that each collection reports the
// calls its gates hold for their turn (floodgate.waiting_call.count,
// attribute floodgate.gate = name), at 0 from the first collection. Give
// s to the middleware or the interceptors with floodgate.WithGateStats
// (grpclimit.WithGateStats, connectlimit.WithGateStats). A nil s, a name
// that is not printable ASCII, or a name already registered with
// WatchGate, is an error; the error of a duplicate wraps
// ErrDuplicateName.
func (m *Metrics) WatchGate(name string, s *floodgate.GateStats) error {
	return m.gates.Add(name, s)
}

// newGates returns the registry of WatchGate, with each gate's attributes.
func newGates() *metricsbase.Gates[metric.ObserveOption] {
	return metricsbase.NewGates(ErrDuplicateName, func(name string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(GateKey.String(name)))
	})
}

// observeKinds reports the gates' waiting calls and the in-flight limits'
// slots.
func (m *Metrics) observeKinds(o metric.Observer) {
	for _, g := range m.gates.All() {
		o.ObserveInt64(m.kinds.waiting, int64(g.Stats.Waiting()), g.V)
	}
	for _, w := range m.limiters.All() {
		if w.InFlight == nil {
			continue
		}
		s := w.InFlight()
		o.ObserveInt64(m.kinds.slots, int64(s.Held), w.limiter)
		o.ObserveInt64(m.kinds.maxSlots, int64(s.Max), w.limiter)
		if s.Leased {
			o.ObserveInt64(m.kinds.lostLeases, clamp(s.LostLeases), w.limiter)
		}
	}
}
