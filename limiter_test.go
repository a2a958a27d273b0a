package floodgate

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRateLargestLimit: 2^24 events per period is the largest limit every
// limiter accepts; one more is refused with a message that names the bound
// and what to do instead, and the documented way round it (the same rate
// over a shorter period) is accepted.
func TestRateLargestLimit(t *testing.T) {
	require.NoError(t, Rate{Limit: 1 << 24, Period: time.Hour}.Validate())
	err := Rate{Limit: 1<<24 + 1, Period: time.Hour}.Validate()
	require.ErrorIs(t, err, ErrInvalidRate)
	for _, want := range []string{"16777216", "2^24", "shorter period", "coarser unit"} {
		assert.True(t, strings.Contains(err.Error(), want), "error %q does not say %q", err, want)
	}

	// 100,000,000 an hour, as the Rate documentation restates it.
	scaled := Rate{Limit: 1_000_000, Period: 36 * time.Second}
	_, err = NewTokenBucket(Rate{Limit: 100_000_000, Period: time.Hour})
	require.ErrorIs(t, err, ErrInvalidRate)
	for name, build := range map[string]func() error{
		"token bucket":    func() error { _, err := NewTokenBucket(scaled, WithBurst(1<<24)); return err },
		"sliding counter": func() error { _, err := NewSlidingCounter(scaled); return err },
	} {
		assert.NoError(t, build(), name)
	}
	// A sliding log keeps an entry per decision: it stops at
	// MaxSlidingLogLimit and says what to use instead.
	_, err = NewSlidingLog(scaled)
	require.ErrorIs(t, err, ErrInvalidRate)
	assert.Contains(t, err.Error(), "SlidingCounter")
	_, err = NewSlidingLog(Rate{Limit: MaxSlidingLogLimit, Period: time.Hour})
	assert.NoError(t, err)
	assert.Equal(t, 100_000_000.0, float64(scaled.Limit)*float64(time.Hour)/float64(scaled.Period))
}
