package otelmetrics

import (
	"errors"

	"github.com/floodgate-go/floodgate/redisstore"
	"go.opentelemetry.io/otel/metric"
)

// leaseInstruments report a leasing Redis limiter's counts
// (redisstore.WithLease), read from its LeaseStats when the SDK collects.
// Only the limiters that lease have these streams, each at 0 from the
// first collection.
type leaseInstruments struct {
	localDecisions, leases, units, returned, stranded, ahead metric.Int64ObservableCounter
}

// newLeaseInstruments creates the lease instruments from meter.
func newLeaseInstruments(meter metric.Meter) (leaseInstruments, error) {
	var li leaseInstruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	li.localDecisions = counter("floodgate.redis.lease.local_decisions", "{decision}",
		"Decisions the Redis limiter allowed from a lease, without a round trip.")
	li.leases = counter("floodgate.redis.leases", "{lease}",
		"Round trips of the Redis limiter that leased units beyond their own decision.")
	li.units = counter("floodgate.redis.lease.units", "{unit}",
		"Units of quota the Redis limiter's leases took, charged in Redis when taken.")
	li.returned = counter("floodgate.redis.lease.returned_units", "{unit}",
		"Leased units given back to Redis unused, with the key's next lease.")
	li.stranded = counter("floodgate.redis.lease.stranded_units", "{unit}",
		"Leased units neither allowed nor given back (their time ran out, their key was evicted or reset): quota lost as if used, the under-admission leases cost.")
	li.ahead = counter("floodgate.redis.lease.ahead_units", "{unit}",
		"Refill a leasing token bucket skipped to place leases ahead of a key used below its rate: under-admission too, bounded per key.")
	return li, errors.Join(errs...)
}

// all returns the lease instruments, for the callback's registration.
func (li *leaseInstruments) all() []metric.Observable {
	return []metric.Observable{li.localDecisions, li.leases, li.units, li.returned, li.stranded, li.ahead}
}

// observe reports the lease counts s of a limiter with attributes attrs.
func (li *leaseInstruments) observe(o metric.Observer, s redisstore.LeaseStats, attrs metric.ObserveOption) {
	o.ObserveInt64(li.localDecisions, clamp(s.LocalDecisions), attrs)
	o.ObserveInt64(li.leases, clamp(s.Leases), attrs)
	o.ObserveInt64(li.units, clamp(s.LeasedUnits), attrs)
	o.ObserveInt64(li.returned, clamp(s.ReturnedUnits), attrs)
	o.ObserveInt64(li.stranded, clamp(s.StrandedUnits), attrs)
	o.ObserveInt64(li.ahead, clamp(s.AheadUnits), attrs)
}

// leasing reports whether s, the lease statistics of a registered limiter,
// are those of a limiter that leases: a Redis limiter without WithLease
// reports a zero MaxKeys, and gets no lease streams.
func leasing(s func() redisstore.LeaseStats) bool {
	return s != nil && s().MaxKeys > 0
}
