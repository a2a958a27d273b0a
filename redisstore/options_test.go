package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// noServer is a Scripter for tests that must never reach Redis.
type noServer struct{}

var errNoServer = errors.New("no server in this test")

func (noServer) EvalSha(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoServer
}

func (noServer) Eval(context.Context, string, []string, []string) ([]int64, error) {
	return nil, errNoServer
}

func TestConstructorErrors(t *testing.T) {
	mem, err := floodgate.NewTokenBucket(floodgate.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	ok := floodgate.PerSecond(10)
	cases := []struct {
		name string
		new  func() error
		want error
	}{
		{"zero limit", tb(floodgate.Rate{Period: time.Second}), floodgate.ErrInvalidRate},
		{"zero period", tb(floodgate.Rate{Limit: 1}), floodgate.ErrInvalidRate},
		{"sub-microsecond period", tb(floodgate.Rate{Limit: 1, Period: 1500 * time.Nanosecond}), floodgate.ErrInvalidRate},
		{"horizon too long", tb(floodgate.Rate{Limit: 1, Period: 100 * 365 * 24 * time.Hour}), floodgate.ErrInvalidRate},
		{"burst horizon too long", tb(floodgate.Rate{Limit: 1, Period: 24 * time.Hour}, redisstore.WithBurst(1<<20)), floodgate.ErrInvalidRate},
		{"zero burst", tb(ok, redisstore.WithBurst(0)), floodgate.ErrInvalidOption},
		{"nil option", tb(ok, nil), floodgate.ErrInvalidOption},
		{"nil clock", tb(ok, redisstore.WithClock(nil)), floodgate.ErrInvalidOption},
		{"zero timeout", tb(ok, redisstore.WithTimeout(0)), floodgate.ErrInvalidOption},
		{"brace in prefix", tb(ok, redisstore.WithPrefix("{fg}")), floodgate.ErrInvalidOption},
		{"nil fallback", tb(ok, redisstore.WithFallback(nil)), floodgate.ErrInvalidOption},
		{"probe without fallback", tb(ok, redisstore.WithProbeInterval(time.Second)), floodgate.ErrInvalidOption},
		{"zero probe interval", tb(ok, redisstore.WithFallback(mem), redisstore.WithProbeInterval(0)), floodgate.ErrInvalidOption},
		{"zero deny cache", tb(ok, redisstore.WithDenyCache(0)), floodgate.ErrInvalidOption},
		{"zero key length", tb(ok, redisstore.WithMaxKeyLength(0)), floodgate.ErrInvalidOption},
		{"count denied on a bucket", tb(ok, redisstore.WithCountDenied()), floodgate.ErrInvalidOption},
		{"burst on a log", sl(ok, redisstore.WithBurst(3)), floodgate.ErrInvalidOption},
		{"count denied with deny cache", sl(ok, redisstore.WithCountDenied(), redisstore.WithDenyCache(10)), floodgate.ErrInvalidOption},
		{"burst on a counter", sc(ok, redisstore.WithBurst(3)), floodgate.ErrInvalidOption},
		{"count denied on a counter", sc(ok, redisstore.WithCountDenied()), floodgate.ErrInvalidOption},
		{"interval refill on a log", sl(ok, redisstore.WithIntervalRefill()), floodgate.ErrInvalidOption},
		{"interval refill on a counter", sc(ok, redisstore.WithIntervalRefill()), floodgate.ErrInvalidOption},
		{"interval burst horizon too long", tb(floodgate.Rate{Limit: 1, Period: 24 * time.Hour}, redisstore.WithBurst(1<<20), redisstore.WithIntervalRefill()), floodgate.ErrInvalidRate},
		{"nil scripter", func() error { _, err := redisstore.NewTokenBucket(nil, ok); return err }, floodgate.ErrInvalidOption},
	}
	for _, tc := range cases {
		if err := tc.new(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func tb(r floodgate.Rate, opts ...redisstore.Option) func() error {
	return func() error { _, err := redisstore.NewTokenBucket(noServer{}, r, opts...); return err }
}

func sl(r floodgate.Rate, opts ...redisstore.Option) func() error {
	return func() error { _, err := redisstore.NewSlidingLog(noServer{}, r, opts...); return err }
}

func sc(r floodgate.Rate, opts ...redisstore.Option) func() error {
	return func() error { _, err := redisstore.NewSlidingCounter(noServer{}, r, opts...); return err }
}

// TestBadInputNeverReachesRedis: costs and keys the limiter can refuse by
// itself are refused with floodgate's sentinels before any round trip.
func TestBadInputNeverReachesRedis(t *testing.T) {
	ctx := context.Background()
	b, err := redisstore.NewTokenBucket(noServer{}, floodgate.PerSecond(5), redisstore.WithMaxKeyLength(8))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		key  string
		n    int
		want error
	}{
		{"k", -1, floodgate.ErrInvalidCost},
		{"123456789", 1, floodgate.ErrKeyTooLong},
		// A cost above the capacity of the rate last read is not bad
		// input until the record is read: another instance may have
		// raised the rate (TestCostJudgedByTheRateRead). The read fails
		// here, and the call is denied with the error, never allowed.
		{"k", 6, redisstore.ErrRedis},
	}
	for _, tc := range cases {
		d, err := b.AllowN(ctx, tc.key, tc.n)
		if !errors.Is(err, tc.want) || d.Allowed || d.Limit != 5 || d.RetryAfter != 0 {
			t.Errorf("AllowN(%q, %d) = %+v, %v; want denied with Limit 5 and %v", tc.key, tc.n, d, err, tc.want)
		}
	}
	// A failing round trip is an error wrapping ErrRedis and the cause.
	d, err := b.Allow(ctx, "k")
	if !errors.Is(err, redisstore.ErrRedis) || !errors.Is(err, errNoServer) || d.Allowed {
		t.Errorf("Allow with no server = %+v, %v; want denied, ErrRedis wrapping the cause", d, err)
	}
}
