package floodgate

// Namespacer is implemented by a limiter whose per-key state lives
// outside its Go value, where another limiter value can reach it too: a
// Redis limiter keeps a key's state in Redis under its key prefix, so two
// limiters built with one prefix count every key in one place, as one
// limiter would, however many Go values there are.
//
// Limits that must not share state consult it: NewPolicySelector and
// NewSelectorFor (any two policies), NewRoutes (policies of different
// names) and All (any two of its limiters) refuse two limiters that
// report the same Namespace, with an error wrapping ErrInvalidOption that
// names both, exactly as they refuse one limiter value used twice. An
// in-memory limiter keeps its state in its own value and needs no
// Namespace: two are told apart by identity.
//
// Business code that builds limiters outside these constructors gets no
// such check: two limiters of one namespace there still count together.
type Namespacer interface {
	// Namespace names the place the limiter keeps its per-key state, in
	// a form fit for an error message (redisstore: `redis keys
	// "floodgate:{*}:tb"`). It must be equal for any two limiters whose
	// keys could collide, and should differ otherwise.
	Namespace() string
}
