package benchmarks

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// redisQuota never denies in a run: a million decisions a second per key
// is far above what one Redis server answers in all.
var redisQuota = quota{limit: 1_000_000, period: time.Second}

// redisKeys is the number of distinct keys the Redis cases spread over.
const redisKeys = 10_000

// redisPopulated records the libraries whose keys are on the server.
// Benchmarks run one at a time, so it needs no lock.
var redisPopulated = map[string]bool{}

// redisDecide is one Redis-backed decision; it is safe for concurrent use.
type redisDecide func(ctx context.Context, key string) (bool, error)

// redisPeer is a Redis-backed limiter under comparison. build gets the
// go-redis client every go-redis library shares and the server's address
// for a library that brings its own client; stop closes what build opened.
type redisPeer struct {
	name  string
	build func(c *redis.Client, addr string, q quota) (decide redisDecide, stop func(), err error)
}

func redisPeers() []redisPeer {
	return []redisPeer{
		{name: "floodgate", build: buildFloodgateGoRedis},
		{name: "floodgate-rueidis", build: buildFloodgateRueidis},
		{name: "redis_rate", build: buildRedisRate},
	}
}

// redisTimeout replaces redisstore's default 100 ms bound on a decision's
// round trip: the figures are throughput, 256 callers share a pool of
// connections, and on a shared machine a stall longer than 100 ms would
// fail the case rather than slow it. redis_rate has no such bound.
const redisTimeout = 10 * time.Second

// buildFloodgateGoRedis: redisstore's token bucket on the shared go-redis
// client, through goredisstore, as redisstore's README shows.
func buildFloodgateGoRedis(c *redis.Client, _ string, q quota) (redisDecide, func(), error) {
	return floodgateRedis(goredisstore.New(c), q, func() {})
}

// buildFloodgateRueidis: redisstore's token bucket on rueidis, which
// pipelines concurrent commands on its connections by itself.
func buildFloodgateRueidis(_ *redis.Client, addr string, q quota) (redisDecide, func(), error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, nil, err
	}
	return floodgateRedis(rueidisstore.New(rc), q, rc.Close)
}

func floodgateRedis(s redisstore.Scripter, q quota, stop func()) (redisDecide, func(), error) {
	tb, err := redisstore.NewTokenBucket(s, floodgate.Rate{Limit: q.limit, Period: q.period},
		redisstore.WithPrefix("bench-floodgate"), redisstore.WithTimeout(redisTimeout))
	if err != nil {
		stop()
		return nil, nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		d, err := tb.Allow(ctx, key)
		return d.Allowed, err
	}, stop, nil
}

// buildRedisRate: go-redis/redis_rate, one GCRA script per decision.
func buildRedisRate(c *redis.Client, _ string, q quota) (redisDecide, func(), error) {
	lim := redis_rate.NewLimiter(c)
	l := redis_rate.Limit{Rate: q.limit, Burst: q.limit, Period: q.period}
	return func(ctx context.Context, key string) (bool, error) {
		res, err := lim.Allow(ctx, key, l)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() {}, nil
}

// BenchmarkRedis reports decisions per second against one loopback Redis
// server from 1, 16 and 256 concurrent callers, over redisKeys populated
// keys, every decision allowed. Each library gets its own key space.
func BenchmarkRedis(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		for _, p := range redisPeers() {
			b.Run("callers="+strconv.Itoa(callers)+"/"+p.name, func(b *testing.B) {
				benchRedis(b, p, callers)
			})
		}
	}
}

func benchRedis(b *testing.B, p redisPeer, callers int) {
	c, addr := redisClient(b)
	ctx := context.Background()
	decide, stop, err := p.build(c, addr, redisQuota)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	defer stop()
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = p.name + ":" + clientIP(i)
	}
	// The keys stay on the server for the life of the process: populate
	// them once per library, not on every b.N the framework tries.
	if !redisPopulated[p.name] {
		if err := runCallers(16, len(keys), func(i int) error { return expectAllowed(ctx, decide, keys[i]) }); err != nil {
			b.Fatalf("%s: populating: %v", p.name, err)
		}
		redisPopulated[p.name] = true
	}
	cpu := startCPU(b)
	start := time.Now()
	err = runCallers(callers, b.N, func(i int) error { return expectAllowed(ctx, decide, keys[i%len(keys)]) })
	elapsed := time.Since(start)
	cpu.report(b)
	if err != nil {
		b.Fatalf("%s: %v", p.name, err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

// errDenied reports a denial in a case where every decision must be
// allowed.
type errDenied string

func (e errDenied) Error() string { return "denied " + string(e) + ", want allowed" }

func expectAllowed(ctx context.Context, decide redisDecide, key string) error {
	ok, err := decide(ctx, key)
	if err != nil {
		return err
	}
	if !ok {
		return errDenied(key)
	}
	return nil
}

// runCallers runs do(0) … do(n-1) from the given number of goroutines and
// returns the first error, after which the callers stop.
func runCallers(callers, n int, do func(i int) error) error {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
		stop    atomic.Bool
	)
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// BenchmarkRedisRounds compares the Redis libraries in interleaved rounds:
// each iteration is one round in which every library, in a rotating
// order, makes redisRoundDecisions decisions from the given number of
// callers over redisKeys keys, all allowed. It reports each library's
// median decisions per second over the rounds and floodgate's ratios to
// redis_rate, the figures of the Redis targets: on a shared machine the
// load changes from one second to the next, and rounds close together in
// time see the same load. Run it with -benchtime Nx for N rounds.
func BenchmarkRedisRounds(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			benchRedisRounds(b, callers)
		})
	}
}

// redisRoundDecisions is the decisions each library makes per round.
const redisRoundDecisions = 20_000

func benchRedisRounds(b *testing.B, callers int) {
	c, addr := redisClient(b)
	ctx := context.Background()
	peers := redisPeers()
	decides := make([]redisDecide, len(peers))
	keys := make([][]string, len(peers))
	for i, p := range peers {
		decide, stop, err := p.build(c, addr, redisQuota)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		defer stop()
		decides[i] = decide
		keys[i] = make([]string, redisKeys)
		for j := range keys[i] {
			keys[i][j] = p.name + ":" + clientIP(j)
		}
		if !redisPopulated[p.name] {
			if err := runCallers(16, redisKeys, func(j int) error { return expectAllowed(ctx, decide, keys[i][j]) }); err != nil {
				b.Fatalf("%s: populating: %v", p.name, err)
			}
			redisPopulated[p.name] = true
		}
	}
	rates := make([][]float64, len(peers))
	// What each decision cost the server, and this process: the server's
	// CPU time (INFO cpu: all its work, reading and answering included),
	// its time in scripts (INFO commandstats: EVALSHA and EVAL), and this
	// process's CPU time, per decision, each round.
	serverCPU := make([][]float64, len(peers))
	scriptTime := make([][]float64, len(peers))
	clientCPU := make([][]float64, len(peers))
	// This process's allocations per decision, each round: the library's,
	// and a small share of the harness's (runCallers' goroutines), the
	// same for every library.
	allocs := make([][]float64, len(peers))
	var ms runtime.MemStats
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for k := range peers {
			i := (round + k) % len(peers)
			before := redisCost(b, c)
			runtime.ReadMemStats(&ms)
			mallocs0 := ms.Mallocs
			cpu0, _ := processCPU()
			start := time.Now()
			err := runCallers(callers, redisRoundDecisions, func(j int) error {
				return expectAllowed(ctx, decides[i], keys[i][j%redisKeys])
			})
			if err != nil {
				b.Fatalf("%s: %v", peers[i].name, err)
			}
			rates[i] = append(rates[i], redisRoundDecisions/time.Since(start).Seconds())
			cpu1, _ := processCPU()
			runtime.ReadMemStats(&ms)
			allocs[i] = append(allocs[i], float64(ms.Mallocs-mallocs0)/redisRoundDecisions)
			after := redisCost(b, c)
			serverCPU[i] = append(serverCPU[i], (after.cpu-before.cpu)/redisRoundDecisions)
			scriptTime[i] = append(scriptTime[i], (after.scripts-before.scripts)/redisRoundDecisions)
			clientCPU[i] = append(clientCPU[i], float64(cpu1-cpu0)/1e3/redisRoundDecisions)
		}
	}
	b.StopTimer()
	med := make(map[string]float64, len(peers))
	medCPU := make(map[string]float64, len(peers))
	for i, p := range peers {
		med[p.name] = median(rates[i])
		medCPU[p.name] = median(serverCPU[i])
		b.ReportMetric(med[p.name], p.name+"-decisions/s")
		b.ReportMetric(medCPU[p.name], p.name+"-server-µs/decision")
		b.ReportMetric(median(scriptTime[i]), p.name+"-script-µs/decision")
		b.ReportMetric(median(clientCPU[i]), p.name+"-client-µs/decision")
		b.ReportMetric(median(allocs[i]), p.name+"-allocs/decision")
	}
	for _, p := range peers {
		if p.name != "redis_rate" {
			b.ReportMetric(med[p.name]/med["redis_rate"], p.name+"/redis_rate")
			b.ReportMetric(medCPU["redis_rate"]/medCPU[p.name], p.name+"-server-saving")
		}
	}
	b.ReportMetric(0, "ns/op") // a round is not an operation
}

// serverCost is the server's running totals: its CPU time and its time in
// scripts, in microseconds.
type serverCost struct{ cpu, scripts float64 }

// redisCost reads the server's CPU time (INFO cpu, user and system) and
// the time its EVALSHA and EVAL calls took (INFO commandstats).
func redisCost(b *testing.B, c *redis.Client) serverCost {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sc serverCost
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			sc.cpu += f * 1e6
		case "cmdstat_evalsha", "cmdstat_eval":
			for _, f := range strings.Split(v, ",") {
				if us, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseFloat(us, 64)
					sc.scripts += n
				}
			}
		}
	}
	return sc
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
