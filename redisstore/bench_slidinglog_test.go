package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/rueidis"
)

// logDecider is one implementation of the Redis sliding log, as the
// benchmark drives it: a decision of cost n on key at a client time.
type logDecider func(ctx context.Context, key string, n int, now time.Time) (allowed bool, err error)

// unboundedLog runs the sliding log's scripts as they were before running
// totals (testdata/unboundedlog), on the keys they used, p:{k}:sl and
// p:{k}:sl:state.
func unboundedLog(b *testing.B, s redisstore.Scripter, p string, r floodgate.Rate) logDecider {
	b.Helper()
	var src []byte
	for _, f := range []string{"prelude.lua", "prelude_log.lua", "slidinglog.lua"} {
		part, err := os.ReadFile("testdata/unboundedlog/" + f)
		if err != nil {
			b.Fatal(err)
		}
		src = append(src, part...)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	limit, period := strconv.Itoa(r.Limit), strconv.FormatInt(r.Period.Microseconds(), 10)
	return func(ctx context.Context, key string, n int, now time.Time) (bool, error) {
		tag := p + ":{" + key + "}:"
		keys := []string{tag + "sl", tag + "sl:state"}
		args := []string{strconv.FormatInt(now.UnixMicro(), 10), strconv.Itoa(n), limit, period, "", "10000"}
		reply, err := s.EvalSha(ctx, sha, keys, args)
		if errors.Is(err, redisstore.ErrNoScript) {
			reply, err = s.Eval(ctx, string(src), keys, args)
		}
		return err == nil && len(reply) > 0 && reply[0] == 1, err
	}
}

// boundedLog runs today's SlidingLog; the time is sent as the limiter's
// client clock.
func boundedLog(b *testing.B, s redisstore.Scripter, p string, r floodgate.Rate) logDecider {
	b.Helper()
	var clock atomic.Int64
	l, err := redisstore.NewSlidingLog(s, r, redisstore.WithPrefix(p), redisstore.WithTimeout(10*time.Second),
		redisstore.WithClock(func() time.Time { return time.UnixMicro(clock.Load()) }))
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex // one time per decision
	return func(ctx context.Context, key string, n int, now time.Time) (bool, error) {
		mu.Lock()
		clock.Store(now.UnixMicro())
		d, err := l.AllowN(ctx, key, n)
		mu.Unlock()
		return d.Allowed, err
	}
}

// fullLog spends the whole limit of key one unit per decision, each at
// its own microsecond after t0, and returns the time after the last.
func fullLog(b *testing.B, decide logDecider, key string, limit int) time.Time {
	b.Helper()
	for i := 0; i < limit; i++ {
		if ok, err := decide(context.Background(), key, 1, t0.Add(time.Duration(i)*time.Microsecond)); err != nil || !ok {
			b.Fatalf("filling the log, decision %d: %v, %v", i, ok, err)
		}
	}
	return t0.Add(time.Duration(limit) * time.Microsecond)
}

// BenchmarkSlidingLogWork measures the attack of issue 18, item 4, on a
// full log of 65,536 one-unit entries, with the scripts before running
// totals ("unbounded") and today's ("bounded"), in the same run on one
// server:
//
//   - denied: a denied AllowN(65536) on the full log, the attacker's call;
//   - honest-meanwhile: a decision of another client, on another
//     connection, while the attacker's denials run back to back;
//   - allowed: an honest allowed decision on a small log, nothing else
//     running, what the bound costs everyone.
//
// Run it with a few iterations: the unbounded denial takes tens of ms.
//
//	go test -run '^$' -bench BenchmarkSlidingLogWork -benchtime 20x .
func BenchmarkSlidingLogWork(b *testing.B) {
	srv := redistest.Start(b)
	connect := func() redisstore.Scripter {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return rueidisstore.New(c)
	}
	attacker, honest := connect(), connect()
	r := floodgate.Rate{Limit: floodgate.MaxSlidingLogLimit, Period: time.Hour}
	impls := []struct {
		name string
		new  func(*testing.B, redisstore.Scripter, string, floodgate.Rate) logDecider
	}{{"unbounded", unboundedLog}, {"bounded", boundedLog}}
	for _, impl := range impls {
		p := prefix(b)
		attack, decide := impl.new(b, attacker, p, r), impl.new(b, honest, p, r)
		now := fullLog(b, attack, "full", r.Limit)
		b.Run("denied/"+impl.name, func(b *testing.B) {
			before := scriptUsec(b, srv.Addr)
			for i := 0; i < b.N; i++ {
				if ok, err := attack(context.Background(), "full", r.Limit, now); err != nil || ok {
					b.Fatalf("AllowN(%d) on a full log: %v, %v", r.Limit, ok, err)
				}
			}
			b.ReportMetric(float64(scriptUsec(b, srv.Addr)-before)/float64(b.N), "server-µs/op")
		})
		b.Run("honest-meanwhile/"+impl.name, func(b *testing.B) {
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
						_, _ = attack(context.Background(), "full", r.Limit, now)
					}
				}
			}()
			time.Sleep(10 * time.Millisecond) // lets the first denial start, not a wait for a refill
			var slowest time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if ok, err := decide(context.Background(), "honest-"+strconv.Itoa(i), 1, now); err != nil || !ok {
					b.Fatalf("honest decision: %v, %v", ok, err)
				}
				slowest = max(slowest, time.Since(start))
			}
			b.StopTimer()
			close(stop)
			<-done
			b.ReportMetric(float64(slowest.Nanoseconds()), "max-ns")
		})
		b.Run("allowed/"+impl.name, func(b *testing.B) {
			before := scriptUsec(b, srv.Addr)
			for i := 0; i < b.N; i++ {
				at := now.Add(time.Duration(i) * time.Millisecond)
				if ok, err := decide(context.Background(), "small-"+strconv.Itoa(i%100), 1, at); err != nil || !ok {
					b.Fatalf("honest decision: %v, %v", ok, err)
				}
			}
			b.ReportMetric(float64(scriptUsec(b, srv.Addr)-before)/float64(b.N), "server-µs/op")
		})
	}
}

// scriptUsec returns the server time, in microseconds, that EVALSHA and
// EVAL have taken since the server started (INFO commandstats): a
// script's whole run, the commands it calls included.
func scriptUsec(b *testing.B, addr string) int64 {
	b.Helper()
	info, err := redistest.Info(addr, "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var us int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "usec=")
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("commandstats line %q: %v", line, err)
		}
		us += n
	}
	return us
}
