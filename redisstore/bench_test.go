package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// benchKeys is the populated key set every benchmark spreads its decisions
// over.
const benchKeys = 10000

var benchKeyNames = func() []string {
	k := make([]string, benchKeys)
	for i := range k {
		k[i] = "client-" + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkDecisions measures decisions per second at 1, 16 and 256
// concurrent callers for the token bucket on each client, and for
// github.com/go-redis/redis_rate/v10 (GCRA on go-redis, the common choice)
// on the same server and the same go-redis client, in the same run. Every
// decision is allowed (the rate is generous), on a populated key set.
// It also reports what each decision cost the server: its CPU time (INFO
// cpu, reading and answering included) and its time in scripts (INFO
// commandstats, EVALSHA and EVAL), per decision.
func BenchmarkDecisions(b *testing.B) {
	addr := redistest.Shared(b)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)

	rate := floodgate.Rate{Limit: 1000000, Period: time.Second}
	decide := map[string]func(ctx context.Context, key string) error{}
	for name, s := range map[string]redisstore.Scripter{"go-redis": goredisstore.New(rdb), "rueidis": rueidisstore.New(rc)} {
		for _, a := range algos {
			// A long timeout: the figures are throughput, and a shared
			// machine stalls now and then.
			r := rate
			if a.name == "SlidingLog" {
				// A log holds one entry per unit: its largest limit,
				// still far above what 10,000 keys see each.
				r.Limit = floodgate.MaxSlidingLogLimit
			}
			l := a.mustNew(b, s, r, redisstore.WithPrefix(prefix(b)), redisstore.WithTimeout(10*time.Second))
			decide[a.name+"/"+name] = func(ctx context.Context, key string) error {
				_, err := l.AllowN(ctx, key, 1)
				return err
			}
		}
	}
	rr := redis_rate.NewLimiter(rdb)
	rrLimit := redis_rate.PerSecond(rate.Limit)
	rrPrefix := prefix(b) + ":"
	decide["redis_rate"] = func(ctx context.Context, key string) error {
		_, err := rr.Allow(ctx, rrPrefix+key, rrLimit)
		return err
	}

	order := []string{"redis_rate", "TokenBucket/go-redis", "TokenBucket/rueidis",
		"SlidingLog/go-redis", "SlidingLog/rueidis", "SlidingCounter/go-redis", "SlidingCounter/rueidis"}
	for _, callers := range []int{1, 16, 256} {
		for _, name := range order {
			f := decide[name]
			b.Run(fmt.Sprintf("callers=%d/%s", callers, name), func(b *testing.B) {
				populate(b, f)
				b.ReportAllocs()
				before := serverCost(b, addr)
				decideConcurrently(b, callers, nil, f)
				after := serverCost(b, addr)
				b.ReportMetric((after.cpu-before.cpu)/float64(b.N), "server-µs/decision")
				b.ReportMetric((after.scripts-before.scripts)/float64(b.N), "script-µs/decision")
			})
		}
	}
}

// decideConcurrently times b.N decisions of f over the populated keys
// from callers goroutines, each under the context newCtx returns (or
// context.Background if newCtx is nil), fails b if any decision failed,
// and reports decisions a second. The timer is stopped when it returns.
func decideConcurrently(b *testing.B, callers int, newCtx func() (context.Context, context.CancelFunc), f func(ctx context.Context, key string) error) {
	b.ResetTimer()
	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if newCtx != nil {
				var cancel context.CancelFunc
				ctx, cancel = newCtx()
				defer cancel()
			}
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := f(ctx, benchKeyNames[i%benchKeys]); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d decisions failed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

// serverTotals are a server's running totals, in microseconds: its CPU
// time, user and system, and the time its EVALSHA and EVAL calls took.
type serverTotals struct{ cpu, scripts float64 }

// serverCost reads the server's totals (INFO cpu and commandstats).
func serverCost(b *testing.B, addr string) serverTotals {
	b.Helper()
	info, err := redistest.Info(addr, "everything")
	if err != nil {
		b.Fatal(err)
	}
	var t serverTotals
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			t.cpu += f * 1e6
		case "cmdstat_evalsha", "cmdstat_eval":
			for _, f := range strings.Split(v, ",") {
				if us, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseFloat(us, 64)
					t.scripts += n
				}
			}
		}
	}
	return t
}

// populate makes one decision on every benchmark key, so that the
// benchmark runs on existing state.
func populate(b *testing.B, f func(context.Context, string) error) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < benchKeys; i += 16 {
				if err := f(ctx, benchKeyNames[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWaitReplicas measures what WithWaitReplicas(1, …) costs a
// decision, against a master with one replica on loopback: ns/op is wall
// time per decision at 1 and 64 callers, with and without WAIT, on each
// client, in the same run.
func BenchmarkWaitReplicas(b *testing.B) {
	master := redistest.Start(b)
	host, port, _ := strings.Cut(master.Addr, ":")
	replica := redistest.Start(b, "--replicaof", host, port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if info, _ := redistest.Info(replica.Addr, "replication"); strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("replica not in sync")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = rdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	scripters := []struct {
		name string
		s    redisstore.Scripter
	}{
		{"go-redis", goredisstore.New(rdb)},
		{"go-redis/wait", goredisstore.New(rdb, goredisstore.WithWaitReplicas(1, time.Second))},
		{"rueidis", rueidisstore.New(rc)},
		{"rueidis/wait", rueidisstore.New(rc, rueidisstore.WithWaitReplicas(1, time.Second))},
	}
	rate := floodgate.Rate{Limit: 1000000, Period: time.Second}
	for _, callers := range []int{1, 64} {
		for _, sc := range scripters {
			l, err := redisstore.NewTokenBucket(sc.s, rate, redisstore.WithPrefix(prefix(b)), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("callers=%d/%s", callers, sc.name), func(b *testing.B) {
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				b.ResetTimer()
				for g := 0; g < callers; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							if _, err := l.Allow(context.Background(), benchKeyNames[i%benchKeys]); err != nil {
								failed.CompareAndSwap(nil, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
