package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests make many on purpose.
	redis.SetLogger(quiet{})
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// verifyNoLeaks checks, when t ends, that no goroutine started since the
// call is left. Call it first: its cleanup then runs last, after the
// clients and servers are closed by theirs. go-redis's background dialer,
// started while a server was down, sleeps a second between probes before
// it sees its pool closed, so the check gives stragglers three.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
			if goleak.Find(ignore) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		goleak.VerifyNone(t, ignore)
	})
}

// client is one Redis client under test, behind the Scripter interface.
type client struct {
	name string
	s    redisstore.Scripter
}

// clients returns a go-redis and a rueidis client connected to addr, both
// closed when t ends.
func clients(t testing.TB, addr string) []client {
	t.Helper()
	return []client{goRedis(t, addr), rueidisClient(t, addr)}
}

func goRedis(t testing.TB, addr string) client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64,
		DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return client{"go-redis", goredisstore.New(rdb)}
}

func rueidisClient(t testing.TB, addr string) client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	t.Cleanup(c.Close)
	return client{"rueidis", rueidisstore.New(c)}
}

// prefix returns a key prefix unique to this run, so that tests sharing a
// server (REDIS_ADDR) never see each other's keys.
func prefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "fgtest:" + hex.EncodeToString(b[:])
}

// limiter is what every Redis limiter is.
type limiter interface {
	floodgate.Limiter
	floodgate.Resetter
}

// algo builds one algorithm's Redis limiter.
type algo struct {
	name string
	new  func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (limiter, error)
}

var algos = []algo{
	{"TokenBucket", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (limiter, error) {
		return redisstore.NewTokenBucket(s, r, opts...)
	}},
	{"SlidingLog", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (limiter, error) {
		return redisstore.NewSlidingLog(s, r, opts...)
	}},
	{"SlidingCounter", func(s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) (limiter, error) {
		return redisstore.NewSlidingCounter(s, r, opts...)
	}},
}

// mustNew builds a limiter or fails t.
func (a algo) mustNew(t testing.TB, s redisstore.Scripter, r floodgate.Rate, opts ...redisstore.Option) limiter {
	t.Helper()
	l, err := a.new(s, r, opts...)
	if err != nil {
		t.Fatalf("%s: %v", a.name, err)
	}
	return l
}

// patient replaces the default 100 ms decision timeout in tests about
// decisions rather than latency: under -race, with other builds on the
// two cores, a round trip now and then takes longer, and the test would
// fail on the timeout instead of checking the decision.
var patient = redisstore.WithTimeout(10 * time.Second)
