package metricsbase

import (
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

// OtherPolicy is the name under which a policy is counted when its own
// name cannot be a label: a name that is not printable ASCII, or a new
// name once MaxPolicies names are known. The adapters export it.
const OtherPolicy = "(other)"

// MaxPolicies bounds the distinct policy names a Policies table holds,
// so that a program passing client keys as policy names grows no series
// per client. The adapters export it.
const MaxPolicies = 256

// Policy is one policy's entry in a Policies table.
type Policy[V any] struct {
	// Name is the name the policy is counted under: its own, or
	// OtherPolicy.
	Name string
	// V is the adapter's per-policy value, typically its counters.
	V V
}

// Policies maps policy names to the adapter's per-policy values, creating
// each on first use, and holds at most MaxPolicies names plus
// OtherPolicy. Looking up a known name takes no lock: the map is replaced,
// never changed, so that a hook reads it with one atomic load. A Policies
// is safe for concurrent use.
type Policies[V any] struct {
	init func(*Policy[V]) // fills in a new entry's V from its Name

	m  atomic.Pointer[map[string]*Policy[V]]
	mu sync.Mutex // serializes the replacements of m
}

// NewPolicies returns an empty table whose new entries init fills in (it
// runs under the table's lock, once per name).
func NewPolicies[V any](init func(*Policy[V])) *Policies[V] {
	t := &Policies[V]{init: init}
	t.m.Store(&map[string]*Policy[V]{})
	return t
}

// Declare makes the entries of names at once, before their first
// decision, so that an adapter reports each policy's outcomes at zero
// from its first collection: Prometheus's rate() and increase() measure
// a counter from its first sample, so a series born at its first
// decision hides that decision, and a whole first burst with it. Each
// name must be a valid floodgate policy name (non-empty printable
// ASCII), and the table can hold no more than MaxPolicies; the error
// wraps floodgate.ErrInvalidOption, and nothing is declared then.
func (t *Policies[V]) Declare(names []string) error {
	distinct := make(map[string]bool, len(names))
	for p := range t.All() {
		distinct[p.Name] = true
	}
	for _, name := range names {
		if name == "" || !Printable(name) {
			return fmt.Errorf("%w: policy name %q: want non-empty printable ASCII, as floodgate's policy names are", floodgate.ErrInvalidOption, name)
		}
		distinct[name] = true
	}
	if len(distinct) > MaxPolicies {
		return fmt.Errorf("%w: %d policy names, more than MaxPolicies (%d)", floodgate.ErrInvalidOption, len(distinct), MaxPolicies)
	}
	for _, name := range names {
		t.Get(name)
	}
	return nil
}

// Get returns the entry of the named policy, or OtherPolicy's when the
// name cannot be a label of its own; the same pointer every time.
func (t *Policies[V]) Get(name string) *Policy[V] {
	known := *t.m.Load()
	if p := known[name]; p != nil {
		return p
	}
	if !Printable(name) || len(known) >= MaxPolicies {
		// Such names are never keys of the map, which cannot grow past
		// MaxPolicies + 1: they are mapped here, without the lock.
		name = OtherPolicy
		if p := known[name]; p != nil {
			return p
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if p := old[name]; p != nil {
		return p
	}
	if len(old) >= MaxPolicies && name != OtherPolicy {
		name = OtherPolicy
		if p := old[name]; p != nil {
			return p
		}
	}
	p := &Policy[V]{Name: name}
	t.init(p)
	next := make(map[string]*Policy[V], len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = p
	t.m.Store(&next)
	return p
}

// All yields every entry, in no particular order; a collection reads the
// table while hooks add to it.
func (t *Policies[V]) All() iter.Seq[*Policy[V]] {
	return func(yield func(*Policy[V]) bool) {
		for _, p := range *t.m.Load() {
			if !yield(p) {
				return
			}
		}
	}
}

// Hook resolves the events of one decision hook to the value and outcome
// to count them under. An adapter's hook does the counting itself, so
// that its increment is a direct call on the request path.
type Hook[V any] struct {
	t *Policies[V]
	// A middleware reports few policies, usually one, and the same name
	// string every time: the entry last used saves the map lookup while
	// the policy stays the same, a third of the hook's cost.
	last atomic.Pointer[Policy[V]]
}

// NewHook returns a Hook on t, for one decision hook function.
func (t *Policies[V]) NewHook() *Hook[V] { return &Hook[V]{t: t} }

// Resolve returns the value of ev's policy and ev's outcome (OutcomeOf),
// or ok false for an event that must not be counted: the consumption
// after the handler (DecisionEvent.AfterHandler), since a request is
// counted once, by the check before its handler.
func (h *Hook[V]) Resolve(ev *floodgate.DecisionEvent) (v *V, o Outcome, ok bool) {
	if ev.AfterHandler {
		return nil, 0, false
	}
	return h.policy(ev), OutcomeOf(ev), true
}

// Capped returns the value of the policy of ev if ev is the settlement of
// a call whose charge its key's debt limits capped
// (floodgate.DecisionEvent.DebtCapped), which the adapters count apart.
func (h *Hook[V]) Capped(ev *floodgate.DecisionEvent) (*V, bool) {
	if !ev.AfterHandler || !ev.DebtCapped {
		return nil, false
	}
	return h.policy(ev), true
}

// policy returns the value of ev's policy, through the entry last used.
func (h *Hook[V]) policy(ev *floodgate.DecisionEvent) *V {
	p := h.last.Load()
	if p == nil || p.Name != ev.Policy {
		if p = h.t.Get(ev.Policy); p.Name == ev.Policy {
			h.last.Store(p)
		}
	}
	return &p.V
}

// Printable reports whether name is printable ASCII, as floodgate
// requires of policy names.
func Printable(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
