package prommetrics

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
)

// leaseCounts is a Redis limiter whose LeaseStats are given, so that each
// field's series can be checked without a Redis server to lease from.
type leaseCounts struct {
	*redisstore.TokenBucket
	s redisstore.LeaseStats
}

func (l leaseCounts) LeaseStats() redisstore.LeaseStats { return l.s }

// newRedisBucket is a token bucket of 100 a minute on a server that never
// answers.
func newRedisBucket(t *testing.T, opts ...redisstore.Option) *redisstore.TokenBucket {
	t.Helper()
	l, err := redisstore.NewTokenBucket(metricstest.DownServer{}, floodgate.PerMinute(100), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLeaseStatsScraped: a leasing Redis limiter's lease counts are
// series at 0 from the first scrape, before any lease; each then reports
// its own field of LeaseStats; a Redis limiter that does not lease has
// none.
func TestLeaseStatsScraped(t *testing.T) {
	m := newMetrics(t)
	if err := m.Watch("hot", newRedisBucket(t, redisstore.WithLease(redisstore.Lease{}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Limiter("plain", newRedisBucket(t)); err != nil {
		t.Fatal(err)
	}
	metricstest.Want(t, metricstest.Only(series(t, m), "floodgate_redis_lease"), map[string]float64{
		"floodgate_redis_lease_local_decisions_total{limiter=hot}": 0,
		"floodgate_redis_leases_total{limiter=hot}":                0,
		"floodgate_redis_lease_units_total{limiter=hot}":           0,
		"floodgate_redis_lease_returned_units_total{limiter=hot}":  0,
		"floodgate_redis_lease_stranded_units_total{limiter=hot}":  0,
		"floodgate_redis_lease_ahead_units_total{limiter=hot}":     0,
	})
	counts := redisstore.LeaseStats{LocalDecisions: 900, LocalUnits: 950, Leases: 40, LeasedUnits: 1000,
		EarlyLeases: 30, ReturnedUnits: 20, StrandedUnits: 7, LocalRefunds: 3, AheadUnits: 2, Keys: 5, MaxKeys: 100}
	if err := m.Watch("counted", leaseCounts{newRedisBucket(t, redisstore.WithLease(redisstore.Lease{})), counts}); err != nil {
		t.Fatal(err)
	}
	metricstest.Want(t, metricstest.Only(series(t, m), "floodgate_redis_lease"), map[string]float64{
		"floodgate_redis_lease_local_decisions_total{limiter=hot}":     0,
		"floodgate_redis_leases_total{limiter=hot}":                    0,
		"floodgate_redis_lease_units_total{limiter=hot}":               0,
		"floodgate_redis_lease_returned_units_total{limiter=hot}":      0,
		"floodgate_redis_lease_stranded_units_total{limiter=hot}":      0,
		"floodgate_redis_lease_ahead_units_total{limiter=hot}":         0,
		"floodgate_redis_lease_local_decisions_total{limiter=counted}": 900,
		"floodgate_redis_leases_total{limiter=counted}":                40,
		"floodgate_redis_lease_units_total{limiter=counted}":           1000,
		"floodgate_redis_lease_returned_units_total{limiter=counted}":  20,
		"floodgate_redis_lease_stranded_units_total{limiter=counted}":  7,
		"floodgate_redis_lease_ahead_units_total{limiter=counted}":     2,
	})
}
