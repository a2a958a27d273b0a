package otelmetrics

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/metricsbase/metricstest"
	"github.com/floodgate-go/floodgate/redisstore"
)

// The calls a middleware holds for their turn are reported per gate at 0
// from the first collection, then the count held, then 0 again.
func TestWaitingCallsObserved(t *testing.T) {
	m, reader := newMetrics(t)
	var s floodgate.GateStats
	if err := m.WatchGate("api", &s); err != nil {
		t.Fatal(err)
	}
	want := func(n float64) {
		t.Helper()
		metricstest.Want(t, metricstest.Only(points(t, reader), "floodgate.waiting"), map[string]float64{"floodgate.waiting_call.count{floodgate.gate=api}": n})
	}
	want(0)
	release := metricstest.HoldWaiting(t, &s, 3)
	want(3)
	release()
	want(0)
	if err := m.WatchGate("api", &s); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("a second gate named api: %v, want ErrDuplicateName", err)
	}
}

// An in-flight limit's held slots and bound are reported from the first
// collection; a Redis one's lost leases too, at 0.
func TestInFlightSlotsObserved(t *testing.T) {
	m, reader := newMetrics(t)
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
		got := points(t, reader)
		metricstest.Want(t, metricstest.Only(got, "floodgate.inflight"), map[string]float64{
			"floodgate.inflight.slot.count{floodgate.limiter=per_key}": held,
			"floodgate.inflight.slot.limit{floodgate.limiter=per_key}": 5,
			"floodgate.inflight.slot.count{floodgate.limiter=shared}":  0,
			"floodgate.inflight.slot.limit{floodgate.limiter=shared}":  7,
		})
		metricstest.Want(t, metricstest.Only(got, "floodgate.redis.inflight"), map[string]float64{
			"floodgate.redis.inflight.lost_leases{floodgate.limiter=shared}": 0,
		})
	}
	want(0)
	release := metricstest.HoldSlots(t, mem, 3)
	want(3)
	release()
	want(0)
}
