package benchmarks

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// leaseQuota is what every library gets in the leased-quota cases: the
// largest rate a redisstore limiter takes, 16.7 million per second per
// key with a burst of as many, never reached here, so every decision is
// allowed and a denial fails the case.
var leaseQuota = quota{limit: 1 << 24, period: time.Second}

// The hot-key mix: leaseHotKeys keys take 9 calls in 10, the other one
// goes to one of leaseColdKeys keys in turn.
const (
	leaseHotKeys  = 10
	leaseColdKeys = 10_000
)

// leaseMixKey returns the key of call i of the hot-key mix.
func leaseMixKey(hot, cold []string, i int) string {
	if i%10 != 9 {
		return hot[i%leaseHotKeys]
	}
	return cold[(i/10)%leaseColdKeys]
}

// leasePeers are the libraries of the leased-quota cases: floodgate's
// token bucket in lease mode (WithLease with its defaults) on go-redis
// and on rueidis, the plain mode for reference, and redis_rate, the
// baseline, on the same go-redis client.
func leasePeers() []redisPeer {
	return []redisPeer{
		{name: "floodgate-lease", build: func(c *redis.Client, _ string, q quota) (redisDecide, func(), error) {
			return floodgateLease(goredisstore.New(c), "bench-lease", q, func() {})
		}},
		{name: "floodgate-lease-rueidis", build: func(_ *redis.Client, addr string, q quota) (redisDecide, func(), error) {
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
			if err != nil {
				return nil, nil, err
			}
			return floodgateLease(rueidisstore.New(rc), "bench-lease-rueidis", q, rc.Close)
		}},
		{name: "floodgate", build: buildFloodgateGoRedis},
		{name: "redis_rate", build: buildRedisRate},
	}
}

func floodgateLease(s redisstore.Scripter, prefix string, q quota, stop func()) (redisDecide, func(), error) {
	tb, err := redisstore.NewTokenBucket(s, floodgate.Rate{Limit: q.limit, Period: q.period},
		redisstore.WithPrefix(prefix), redisstore.WithTimeout(redisTimeout), redisstore.WithLease(redisstore.Lease{}))
	if err != nil {
		stop()
		return nil, nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		d, err := tb.Allow(ctx, key)
		return d.Allowed, err
	}, stop, nil
}

// BenchmarkRedisLeaseRounds compares leased quota with redis_rate in
// interleaved rounds, as BenchmarkRedisRounds does: in each round every
// library, in a rotating order, makes leaseRoundDecisions decisions, and
// the case reports each library's median decisions per second and
// floodgate's ratios to redis_rate. Cases:
//
//   - mix/callers=256: 256 callers, 10 hot keys taking 90 % of the calls,
//     10,000 cold keys (populated) the rest, everything allowed;
//   - hot/callers=1: one caller on one hot key.
//
// Run it with -benchtime Nx for N rounds.
func BenchmarkRedisLeaseRounds(b *testing.B) {
	b.Run("mix/callers=256", func(b *testing.B) { benchLeaseRounds(b, 256, true) })
	b.Run("hot/callers=1", func(b *testing.B) { benchLeaseRounds(b, 1, false) })
}

// leaseRoundDecisions is the decisions each library makes per round.
const leaseRoundDecisions = 200_000

func benchLeaseRounds(b *testing.B, callers int, mix bool) {
	c, addr := redisClient(b)
	ctx := context.Background()
	peers := leasePeers()
	decides := make([]redisDecide, len(peers))
	hot := make([][]string, len(peers))
	cold := make([][]string, len(peers))
	for i, p := range peers {
		decide, stop, err := p.build(c, addr, leaseQuota)
		if err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		defer stop()
		decides[i] = decide
		for j := 0; j < leaseHotKeys; j++ {
			hot[i] = append(hot[i], p.name+":hot-"+strconv.Itoa(j))
		}
		for j := 0; j < leaseColdKeys; j++ {
			cold[i] = append(cold[i], p.name+":"+clientIP(j))
		}
		if err := runCallers(16, leaseColdKeys, func(j int) error { return expectAllowed(ctx, decide, cold[i][j]) }); err != nil {
			b.Fatalf("%s: populating: %v", p.name, err)
		}
	}
	key := func(i, j int) string {
		if mix {
			return leaseMixKey(hot[i], cold[i], j)
		}
		return hot[i][0]
	}
	rates := make([][]float64, len(peers))
	b.ResetTimer()
	for round := 0; round < b.N; round++ {
		for k := range peers {
			i := (round + k) % len(peers)
			n := leaseRoundDecisions
			if peers[i].name == "redis_rate" || peers[i].name == "floodgate" {
				n /= 10 // one round trip per decision: fewer, or a round takes minutes
			}
			start := time.Now()
			err := runCallers(callers, n, func(j int) error { return expectAllowed(ctx, decides[i], key(i, j)) })
			if err != nil {
				b.Fatalf("%s: %v", peers[i].name, err)
			}
			rates[i] = append(rates[i], float64(n)/time.Since(start).Seconds())
		}
	}
	b.StopTimer()
	reportRounds(b, peers, rates)
}

// reportRounds reports each peer's median rate and floodgate's ratios to
// redis_rate.
func reportRounds(b *testing.B, peers []redisPeer, rates [][]float64) {
	med := make(map[string]float64, len(peers))
	for i, p := range peers {
		med[p.name] = median(rates[i])
		b.ReportMetric(med[p.name], p.name+"-decisions/s")
	}
	for _, p := range peers {
		if p.name != "redis_rate" {
			b.ReportMetric(med[p.name]/med["redis_rate"], p.name+"/redis_rate")
		}
	}
	b.ReportMetric(0, "ns/op") // a round is not an operation
}
