package prommetrics

import (
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/prometheus/client_golang/prometheus"
)

// The descriptors of a leasing Redis limiter's counts
// (redisstore.WithLease), read from its LeaseStats at scrape time. Only
// the limiters that lease have these series, each at 0 from the first
// scrape.
var (
	leaseLocalDecisionsDesc = prometheus.NewDesc("floodgate_redis_lease_local_decisions_total",
		"Decisions the Redis limiter allowed from a lease, without a round trip.", []string{"limiter"}, nil)
	leasesDesc = prometheus.NewDesc("floodgate_redis_leases_total",
		"Round trips of the Redis limiter that leased units beyond their own decision.", []string{"limiter"}, nil)
	leaseUnitsDesc = prometheus.NewDesc("floodgate_redis_lease_units_total",
		"Units of quota the Redis limiter's leases took, charged in Redis when taken.", []string{"limiter"}, nil)
	leaseReturnedUnitsDesc = prometheus.NewDesc("floodgate_redis_lease_returned_units_total",
		"Leased units given back to Redis unused, with the key's next lease.", []string{"limiter"}, nil)
	leaseStrandedUnitsDesc = prometheus.NewDesc("floodgate_redis_lease_stranded_units_total",
		"Leased units neither allowed nor given back (their time ran out, their key was evicted or reset): quota lost as if used, the under-admission leases cost.",
		[]string{"limiter"}, nil)
	leaseAheadUnitsDesc = prometheus.NewDesc("floodgate_redis_lease_ahead_units_total",
		"Refill a leasing token bucket skipped to place leases ahead of a key used below its rate: under-admission too, bounded per key.",
		[]string{"limiter"}, nil)
)

// leaseDescs are the lease descriptors, for Describe.
var leaseDescs = []*prometheus.Desc{leaseLocalDecisionsDesc, leasesDesc, leaseUnitsDesc,
	leaseReturnedUnitsDesc, leaseStrandedUnitsDesc, leaseAheadUnitsDesc}

// leasing reports whether s, the lease statistics of a registered limiter,
// are those of a limiter that leases: a Redis limiter without WithLease
// reports a zero MaxKeys, and gets no lease series.
func leasing(s func() redisstore.LeaseStats) bool {
	return s != nil && s().MaxKeys > 0
}

// collectLease sends the lease counts s of the limiter name.
func collectLease(ch chan<- prometheus.Metric, name string, s redisstore.LeaseStats) {
	for _, c := range []struct {
		desc *prometheus.Desc
		n    uint64
	}{
		{leaseLocalDecisionsDesc, s.LocalDecisions},
		{leasesDesc, s.Leases},
		{leaseUnitsDesc, s.LeasedUnits},
		{leaseReturnedUnitsDesc, s.ReturnedUnits},
		{leaseStrandedUnitsDesc, s.StrandedUnits},
		{leaseAheadUnitsDesc, s.AheadUnits},
	} {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.n), name)
	}
}
