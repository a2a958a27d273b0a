package metricsbase

import (
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate"
)

// Sources are the statistics a limiter offers, read at collection time.
// R and L are the Stats and LeaseStats types of redisstore's limiters,
// parameters so that this package need not import redisstore.
type Sources[R, L any] struct {
	Store func() floodgate.Stats // nil if the limiter has no in-memory key store
	Redis func() R               // nil if it is not a Redis limiter
	// Lease is nil if the limiter has no LeaseStats method. A Redis
	// limiter that does not lease has one too: the adapter tells it from
	// the stats themselves.
	Lease func() L
	// InFlight is nil unless the limiter is an in-flight limit
	// (floodgate.InFlight, redisstore.InFlight).
	InFlight func() floodgate.InFlightStats
}

// None reports that the limiter offers no statistics at all.
func (s Sources[R, L]) None() bool {
	return s.Store == nil && s.Redis == nil && s.Lease == nil && s.InFlight == nil
}

// SourcesOf returns the statistics methods l offers: floodgate's
// in-memory limiters' Stats, redisstore's limiters' Stats returning R
// and LeaseStats returning L, and the in-flight limits' InFlightStats.
func SourcesOf[R, L any](l floodgate.Limiter) Sources[R, L] {
	var s Sources[R, L]
	if st, ok := l.(interface{ Stats() floodgate.Stats }); ok {
		s.Store = st.Stats
	}
	if st, ok := l.(interface{ Stats() R }); ok {
		s.Redis = st.Stats
	}
	if st, ok := l.(interface{ LeaseStats() L }); ok {
		s.Lease = st.LeaseStats
	}
	if st, ok := l.(interface {
		InFlightStats() floodgate.InFlightStats
	}); ok {
		s.InFlight = st.InFlightStats
	}
	return s
}

// Registry holds the limiters an adapter reports, each under its own
// name, as the adapter's value W (its sources and whatever the adapter
// builds once per limiter, such as attribute sets). It is safe for
// concurrent use; All may run while limiters are added.
type Registry[R, L, W any] struct {
	errDuplicate error
	entry        func(name string, s Sources[R, L]) W

	mu    sync.Mutex
	names map[string]bool
	list  []W // append-only
}

// NewRegistry returns an empty Registry. A name registered twice is
// refused with an error wrapping errDuplicate, the adapter's own
// sentinel; entry builds the adapter's value of a limiter from its name
// and sources.
func NewRegistry[R, L, W any](errDuplicate error, entry func(name string, s Sources[R, L]) W) *Registry[R, L, W] {
	return &Registry[R, L, W]{errDuplicate: errDuplicate, entry: entry, names: make(map[string]bool)}
}

// Watch registers l, which must offer statistics, for an adapter's Watch.
func (r *Registry[R, L, W]) Watch(name string, l floodgate.Limiter) error {
	if l == nil {
		return errNil(name)
	}
	s := SourcesOf[R, L](l)
	if s.None() {
		return fmt.Errorf("%w: limiter %q (%T) reports no Stats to watch", floodgate.ErrInvalidOption, name, l)
	}
	return r.add(name, s)
}

// Register registers l, whose statistics are optional, for an adapter's
// Limiter, which times l's decisions.
func (r *Registry[R, L, W]) Register(name string, l floodgate.Limiter) error {
	if l == nil {
		return errNil(name)
	}
	return r.add(name, SourcesOf[R, L](l))
}

func errNil(name string) error {
	return fmt.Errorf("%w: nil limiter %q", floodgate.ErrInvalidOption, name)
}

// add records name, refusing a name that cannot be a label and a
// duplicate: two limiters under one name would add up into one series
// and hide each other.
func (r *Registry[R, L, W]) add(name string, s Sources[R, L]) error {
	if name == "" || !Printable(name) {
		return fmt.Errorf("%w: limiter name %q must be non-empty printable ASCII", floodgate.ErrInvalidOption, name)
	}
	w := r.entry(name, s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[name] {
		return fmt.Errorf("%w: limiter %q", r.errDuplicate, name)
	}
	r.names[name] = true
	r.list = append(r.list, w)
	return nil
}

// All returns the registered limiters' values in the order they were
// added. The caller must not change the slice.
func (r *Registry[R, L, W]) All() []W {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.list // append-only: the prefix returned here never changes
}
