package otelmetrics

import (
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
)

// leaseCounts is a Redis limiter whose LeaseStats are given, so that each
// field's data point can be checked without a Redis server to lease from.
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

// TestLeaseStatsObserved: a leasing Redis limiter's lease counts are data
// points at 0 from the first collection, before any lease; each then
// reports its own field of LeaseStats; a Redis limiter that does not
// lease has none.
func TestLeaseStatsObserved(t *testing.T) {
	m, reader := newMetrics(t)
	if err := m.Watch("hot", newRedisBucket(t, redisstore.WithLease(redisstore.Lease{}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Limiter("plain", newRedisBucket(t)); err != nil {
		t.Fatal(err)
	}
	atZero := map[string]float64{
		"floodgate.redis.lease.local_decisions{floodgate.limiter=hot}": 0,
		"floodgate.redis.leases{floodgate.limiter=hot}":                0,
		"floodgate.redis.lease.units{floodgate.limiter=hot}":           0,
		"floodgate.redis.lease.returned_units{floodgate.limiter=hot}":  0,
		"floodgate.redis.lease.stranded_units{floodgate.limiter=hot}":  0,
		"floodgate.redis.lease.ahead_units{floodgate.limiter=hot}":     0,
	}
	// The prefix takes floodgate.redis.leases too.
	metricstest.Want(t, metricstest.Only(points(t, reader), "floodgate.redis.lease"), atZero)
	counts := redisstore.LeaseStats{LocalDecisions: 900, LocalUnits: 950, Leases: 40, LeasedUnits: 1000,
		EarlyLeases: 30, ReturnedUnits: 20, StrandedUnits: 7, LocalRefunds: 3, AheadUnits: 2, Keys: 5, MaxKeys: 100}
	if err := m.Watch("counted", leaseCounts{newRedisBucket(t, redisstore.WithLease(redisstore.Lease{})), counts}); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"floodgate.redis.lease.local_decisions{floodgate.limiter=counted}": 900,
		"floodgate.redis.leases{floodgate.limiter=counted}":                40,
		"floodgate.redis.lease.units{floodgate.limiter=counted}":           1000,
		"floodgate.redis.lease.returned_units{floodgate.limiter=counted}":  20,
		"floodgate.redis.lease.stranded_units{floodgate.limiter=counted}":  7,
		"floodgate.redis.lease.ahead_units{floodgate.limiter=counted}":     2,
	}
	for k, v := range atZero {
		want[k] = v
	}
	metricstest.Want(t, metricstest.Only(points(t, reader), "floodgate.redis.lease"), want)
}
