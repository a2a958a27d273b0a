package metricsbase

import (
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate"
)

// Gate is a floodgate.GateStats registered under a name, with whatever
// the adapter builds once for it (V: attribute sets, say).
type Gate[V any] struct {
	Name  string
	Stats *floodgate.GateStats
	V     V
}

// Gates holds the gates an adapter reports, each under its own name. It
// is safe for concurrent use; All may run while gates are added.
type Gates[V any] struct {
	errDuplicate error
	entry        func(name string) V

	mu    sync.Mutex
	names map[string]bool
	list  []*Gate[V] // append-only
}

// NewGates returns an empty Gates. A name registered twice is refused
// with an error wrapping errDuplicate; entry builds the adapter's value
// of a gate from its name.
func NewGates[V any](errDuplicate error, entry func(name string) V) *Gates[V] {
	return &Gates[V]{errDuplicate: errDuplicate, entry: entry, names: make(map[string]bool)}
}

// Add registers s under name, refusing a nil s, a name that cannot be a
// label and a duplicate.
func (g *Gates[V]) Add(name string, s *floodgate.GateStats) error {
	switch {
	case s == nil:
		return fmt.Errorf("%w: nil GateStats %q", floodgate.ErrInvalidOption, name)
	case name == "" || !Printable(name):
		return fmt.Errorf("%w: gate name %q must be non-empty printable ASCII", floodgate.ErrInvalidOption, name)
	}
	e := &Gate[V]{Name: name, Stats: s, V: g.entry(name)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names[name] {
		return fmt.Errorf("%w: gate %q", g.errDuplicate, name)
	}
	g.names[name] = true
	g.list = append(g.list, e)
	return nil
}

// All returns the registered gates in the order they were added. The
// caller must not change the slice.
func (g *Gates[V]) All() []*Gate[V] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.list
}
