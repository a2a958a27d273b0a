package metricsbase

import (
	"fmt"
	"math"

	"github.com/floodgate-go/floodgate"
)

// Buckets returns a copy of bounds, the histogram bucket bounds of an
// adapter's WithBuckets option, or an error wrapping
// floodgate.ErrInvalidOption unless there is at least one and they are
// finite and strictly increasing.
func Buckets(bounds []float64) ([]float64, error) {
	if len(bounds) == 0 {
		return nil, fmt.Errorf("%w: no histogram buckets", floodgate.ErrInvalidOption)
	}
	for i, b := range bounds {
		if math.IsNaN(b) || math.IsInf(b, 0) {
			return nil, fmt.Errorf("%w: histogram bucket %v is not finite", floodgate.ErrInvalidOption, b)
		}
		if i > 0 && b <= bounds[i-1] {
			return nil, fmt.Errorf("%w: histogram buckets %v are not strictly increasing", floodgate.ErrInvalidOption, bounds)
		}
	}
	return append([]float64(nil), bounds...), nil
}
