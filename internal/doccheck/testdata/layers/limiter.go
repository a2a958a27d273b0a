package layers

import (
	"context"
	"net/http"
)

// Outcome in a comment is no reference.
type bucket struct {
	Gate int // a field of that name is the bucket's own
}

// Call is a method of bucket's: its own name.
func (b *bucket) Call(ctx context.Context, s selector) {
	_ = s.Call // a selector is another type's
	_ = http.StatusOK
	_ = bucket{Gate: 1}
}

type selector struct{ Call int }

// WithSettledCost names the middleware's option type and the outcome: the
// two references the check reports.
func WithSettledCost() MiddlewareOption { return nil }

func (out *Outcome) Context() {}
