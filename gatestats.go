package floodgate

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// GateStats reads, for metrics, the state of the admission cores it was
// given to with WithGateStats: the calls they hold for their turn
// (WithWait), which a middleware or an interceptor otherwise keeps to
// itself. Give one to a middleware (NewMiddleware and its siblings,
// ginlimit's constructors) or an interceptor (grpclimit's and
// connectlimit's WithGateStats), and register it with a metrics adapter
// (prommetrics and otelmetrics' WatchGate); an adapter that builds a
// gate per route (grpclimit.NewRoutes) adds them all up. The zero value
// is ready to use; a GateStats is safe for concurrent use, and reading
// it takes no lock.
type GateStats struct {
	mu    sync.Mutex
	gates atomic.Pointer[[]*Gate] // copied on write: readers take no lock
}

// WithGateStats makes the gates built with this option report to s (see
// GateStats). Every gate built from the option reports to it: the
// middleware's one, or each route's of an interceptor over a route
// table. A nil s is an error wrapping ErrInvalidOption.
func WithGateStats(s *GateStats) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if s == nil {
			return fmt.Errorf("%w: WithGateStats: nil *GateStats", ErrInvalidOption)
		}
		c.stats = s
		return c.once("WithGateStats")
	}
}

// add records g, a gate built with WithGateStats(s).
func (s *GateStats) add(g *Gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gates []*Gate
	if old := s.gates.Load(); old != nil {
		gates = append(gates, *old...)
	}
	gates = append(gates, g)
	s.gates.Store(&gates)
}

// Waiting returns how many calls the gates hold for their turn now
// (WithWait; 0 without it).
func (s *GateStats) Waiting() int {
	n := 0
	if gates := s.gates.Load(); gates != nil {
		for _, g := range *gates {
			n += g.Waiting()
		}
	}
	return n
}

// Gates returns how many gates report to s: 0 until a middleware or
// interceptor built with WithGateStats(s) exists.
func (s *GateStats) Gates() int {
	if gates := s.gates.Load(); gates != nil {
		return len(*gates)
	}
	return 0
}
