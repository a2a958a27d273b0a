package metricsbase

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestBuckets: bounds are copied when valid and refused, with the reason,
// when empty, not finite or not strictly increasing.
func TestBuckets(t *testing.T) {
	in := []float64{0.001, 0.01, 1}
	got, err := Buckets(in)
	if err != nil || fmt.Sprint(got) != "[0.001 0.01 1]" {
		t.Fatalf("Buckets(%v) = %v, %v", in, got, err)
	}
	in[0] = 0.5
	if got[0] != 0.001 {
		t.Fatal("Buckets kept the caller's slice")
	}
	for _, bad := range [][]float64{nil, {math.NaN()}, {0.1, math.Inf(1)}, {0.1, 0.1}, {0.1, 0.01}} {
		if b, err := Buckets(bad); !errors.Is(err, floodgate.ErrInvalidOption) || b != nil {
			t.Errorf("Buckets(%v) = %v, %v; want ErrInvalidOption", bad, b, err)
		}
	}
}
