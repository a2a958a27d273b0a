package waitreplicas

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestPlan walks the WAIT of a batch against the time left before its
// earliest deadline: WAIT's own timeout is at most a third of it and at
// most the configured one, the client gives up at half of it, and with
// under 3 ms left no WAIT is sent.
func TestPlan(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	cases := []struct {
		max, left time.Duration
		millis    int64
	}{
		{500 * ms, 100 * ms, 33}, // a WAIT above the decision timeout
		{100 * ms, 100 * ms, 33}, // at it
		{80 * ms, 100 * ms, 33},  // just under it
		{10 * ms, 100 * ms, 10},  // well under it: as configured
		{10 * ms, 15 * ms, 5},
		{time.Second, 3 * ms, 1},
		{time.Second, 5999 * time.Microsecond, 1},
	}
	for _, c := range cases {
		cfg, err := New(1, c.max)
		if err != nil {
			t.Fatal(err)
		}
		dl := t0.Add(c.left)
		p, err := cfg.Plan(t0, dl, true)
		if err != nil || p.Millis != c.millis || p.Cutoff.Sub(t0) != c.left/2 {
			t.Errorf("WAIT %v, %v left: %+v (cutoff after %v), %v; want %d ms, cutoff after %v",
				c.max, c.left, p, p.Cutoff.Sub(t0), err, c.millis, c.left/2)
		}
	}
	cfg, _ := New(1, 10*ms)
	for _, left := range []time.Duration{2999 * time.Microsecond, 0, -ms} {
		if p, err := cfg.Plan(t0, t0.Add(left), true); !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Errorf("%v left: %+v, %v; want no WAIT and ErrNotReplicated", left, p, err)
		}
	}
	if p, err := cfg.Plan(t0, time.Time{}, false); err != nil || p.Millis != 10 || !p.Cutoff.IsZero() {
		t.Errorf("no deadline: %+v, %v; want the configured 10 ms and no cutoff", p, err)
	}
}

// TestCheck: enough acknowledgements pass; too few, or no reply at all
// (the client gave up at the cutoff), are ErrNotReplicated.
func TestCheck(t *testing.T) {
	cfg, _ := New(2, time.Second)
	p := Plan{Millis: 50}
	if err := cfg.Check(p, 2, nil); err != nil {
		t.Errorf("2 of 2: %v", err)
	}
	if err := cfg.Check(p, 1, nil); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("1 of 2: %v, want ErrNotReplicated", err)
	}
	if err := cfg.Check(p, 0, errors.New("i/o timeout")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("no reply: %v, want ErrNotReplicated", err)
	}
}

// TestNew refuses what WAIT cannot do.
func TestNew(t *testing.T) {
	for _, c := range []struct {
		n       int
		timeout time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, 999 * time.Microsecond}} {
		if _, err := New(c.n, c.timeout); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("New(%d, %v): %v, want ErrInvalidOption", c.n, c.timeout, err)
		}
	}
}
