package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// TestOptionGivenTwice: a Redis limiter option given twice is an error,
// as for the in-memory limiters, never "the last one wins".
func TestOptionGivenTwice(t *testing.T) {
	srv := &scriptedServer{}
	mem, err := floodgate.NewTokenBucket(floodgate.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return t0 }
	for _, tt := range []struct {
		name string
		kind string
		opt  func(i int) redisstore.Option
	}{
		{"WithPrefix", "token bucket", func(i int) redisstore.Option { return redisstore.WithPrefix("p" + string(rune('a'+i))) }},
		{"WithBurst", "token bucket", func(i int) redisstore.Option { return redisstore.WithBurst(3 + i) }},
		{"WithClock", "token bucket", func(int) redisstore.Option { return redisstore.WithClock(clock) }},
		{"WithTimeout", "token bucket", func(i int) redisstore.Option { return redisstore.WithTimeout(time.Duration(i+1) * time.Second) }},
		{"WithFallback", "token bucket", func(int) redisstore.Option { return redisstore.WithFallback(mem) }},
		{"WithDenyCache", "token bucket", func(i int) redisstore.Option { return redisstore.WithDenyCache(10 + i) }},
		{"WithMaxKeyLength", "token bucket", func(i int) redisstore.Option { return redisstore.WithMaxKeyLength(100 + i) }},
		{"WithCountDenied", "sliding log", func(int) redisstore.Option { return redisstore.WithCountDenied() }},
		{"WithIntervalRefill", "token bucket", func(int) redisstore.Option { return redisstore.WithIntervalRefill() }},
	} {
		build := func(opts ...redisstore.Option) error {
			if tt.kind == "sliding log" {
				_, err := redisstore.NewSlidingLog(srv, floodgate.PerMinute(5), opts...)
				return err
			}
			_, err := redisstore.NewTokenBucket(srv, floodgate.PerMinute(5), opts...)
			return err
		}
		if err := build(tt.opt(0)); err != nil {
			t.Fatalf("%s once: %v", tt.name, err)
		}
		err := build(tt.opt(0), tt.opt(1))
		if !errors.Is(err, floodgate.ErrInvalidOption) || !strings.Contains(err.Error(), tt.name+" given twice") {
			t.Errorf("%s twice: err = %v, want ErrInvalidOption naming it", tt.name, err)
		}
	}
}
