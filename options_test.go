package floodgate

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// TestOptionGivenTwice: a limiter option repeated is a construction error,
// as it is for the middleware's options, whatever the two values are (the
// same value twice too: the repeat is the mistake, not the conflict).
func TestOptionGivenTwice(t *testing.T) {
	clock := func() time.Time { return time.Unix(0, 0) }
	build := map[string]func(opts ...Option) error{
		"token bucket": func(opts ...Option) error {
			_, err := NewTokenBucket(PerMinute(5), opts...)
			return err
		},
		"sliding log": func(opts ...Option) error {
			_, err := NewSlidingLog(PerMinute(5), opts...)
			return err
		},
		"sliding counter": func(opts ...Option) error {
			_, err := NewSlidingCounter(PerMinute(5), opts...)
			return err
		},
		"rate.Limiter adapter": func(opts ...Option) error {
			_, err := FromRateLimiter(rate.NewLimiter(1, 1), opts...)
			return err
		},
	}
	tests := []struct {
		name string
		on   []string // constructors the option applies to
		opt  func(i int) Option
	}{
		{"WithBurst", []string{"token bucket"}, func(i int) Option { return WithBurst(3 + i) }},
		{"WithIntervalRefill", []string{"token bucket"}, func(int) Option { return WithIntervalRefill() }},
		{"WithCountDenied", []string{"sliding log"}, func(int) Option { return WithCountDenied() }},
		{"WithMaxKeys", []string{"token bucket", "sliding log", "sliding counter"}, func(i int) Option { return WithMaxKeys(1000 + i) }},
		{"WithMaxKeyLength", []string{"token bucket", "sliding log", "sliding counter"}, func(i int) Option { return WithMaxKeyLength(100 + i) }},
		{"WithShards", []string{"token bucket", "sliding log", "sliding counter"}, func(i int) Option { return WithShards(4 << i) }},
		{"WithForgetEvicted", []string{"token bucket", "sliding log", "sliding counter"}, func(int) Option { return WithForgetEvicted() }},
		{"WithClock", []string{"token bucket", "sliding log", "sliding counter", "rate.Limiter adapter"}, func(int) Option { return WithClock(clock) }},
	}
	for _, tt := range tests {
		for _, kind := range tt.on {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				require.NoError(t, build[kind](tt.opt(0)), "once is fine")
				err := build[kind](tt.opt(0), tt.opt(1))
				require.ErrorIs(t, err, ErrInvalidOption)
				assert.True(t, strings.Contains(err.Error(), tt.name+" given twice"), "error %q names the option", err)
				err = build[kind](tt.opt(0), WithMaxKeyLength(64), tt.opt(0))
				if tt.name != "WithMaxKeyLength" {
					require.ErrorIs(t, err, ErrInvalidOption, "the same value twice, apart")
				}
			})
		}
	}
}
