package prommetrics

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
)

// The calls a middleware holds for their turn are a gauge per gate at 0
// from the first scrape, then the count held, then 0 again once served.
func TestWaitingCallsScraped(t *testing.T) {
	m := newMetrics(t)
	var s floodgate.GateStats
	if err := m.WatchGate("api", &s); err != nil {
		t.Fatal(err)
	}
	want := func(n float64) {
		t.Helper()
		metricstest.Want(t, metricstest.Only(series(t, m), "floodgate_waiting"), map[string]float64{"floodgate_waiting_calls{gate=api}": n})
	}
	want(0)
	release := metricstest.HoldWaiting(t, &s, 3)
	want(3)
	release()
	want(0)
	if err := m.WatchGate("api", &s); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("a second gate named api: %v, want ErrDuplicateName", err)
	}
	if err := m.WatchGate("nil", nil); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("nil GateStats: %v, want ErrInvalidOption", err)
	}
}

// An in-flight limit's held slots and bound are gauges at 0 from the
// first scrape; a Redis one's lost leases a counter at 0 from the start
// too. Before, Watch refused the in-memory limit (no Stats) and the
// Redis one had only its error counts.
func TestInFlightSlotsScraped(t *testing.T) {
	m := newMetrics(t)
	mem, err := floodgate.NewInFlight(5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Watch("per_key", mem); err != nil {
		t.Fatal(err)
	}
	red, err := redisstore.NewInFlight(metricstest.DownServer{}, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = red.Close() })
	if err := m.Watch("shared", red); err != nil {
		t.Fatal(err)
	}
	want := func(held float64) {
		t.Helper()
		metricstest.Want(t, metricstest.Only(series(t, m), "floodgate_inflight"), map[string]float64{
			"floodgate_inflight_slots{limiter=per_key}":     held,
			"floodgate_inflight_max_slots{limiter=per_key}": 5,
			"floodgate_inflight_slots{limiter=shared}":      0,
			"floodgate_inflight_max_slots{limiter=shared}":  7,
		})
		metricstest.Want(t, metricstest.Only(series(t, m), "floodgate_redis_inflight"), map[string]float64{
			"floodgate_redis_inflight_lost_leases_total{limiter=shared}": 0,
		})
	}
	want(0)
	release := metricstest.HoldSlots(t, mem, 3)
	want(3)
	release()
	want(0)
}
