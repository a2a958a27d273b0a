package floodgate_test

import (
	"os"
	"testing"
)

// fullSize reports whether the attack tests (the key sprays, the spoofed
// headers) run at the sizes the README's Reliability table quotes:
// FLOODGATE_FULL=1 asks for them, outside -short. They take minutes
// there, and far longer under the race detector, which adds nothing to
// these single-goroutine tests; by default they run scaled down, each
// test saying how, so that go test ./... stays quick and still fails
// where the full size would.
func fullSize() bool {
	return os.Getenv("FLOODGATE_FULL") == "1" && !testing.Short()
}
