package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// BenchmarkDecisionScriptTime measures what one decision costs the Redis
// server, from INFO commandstats (EVALSHA's microseconds over its calls,
// reset before each case), beside ns/op and allocs/op on the client, one
// caller, rueidis, on a populated key set: plain decisions of each
// algorithm; a PlanLimiter's decisions on one plan (the common case); and
// two PlanLimiters on different plans deciding the same keys in turn, as
// two instances whose caches disagree on the keys' plan do, so that every
// decision meets a key last written under the other plan.
func BenchmarkDecisionScriptTime(b *testing.B) {
	addr := redistest.Shared(b)
	s := rueidisClient(b, addr).s
	plans := [2]floodgate.Plan{{Name: "a", Rate: floodgate.Rate{Limit: 1000, Period: time.Hour}},
		{Name: "b", Rate: floodgate.Rate{Limit: 3000, Period: time.Hour}}}
	for _, alg := range planAlgos {
		newPlans := func(p string, plan floodgate.Plan) *floodgate.PlanLimiter {
			l, err := floodgate.NewPlanLimiter(floodgate.PlanConfig{
				Resolve: func(context.Context, string) (floodgate.Plan, error) { return plan, nil },
				New: func(plan floodgate.Plan) (floodgate.Limiter, error) {
					return alg.redis(s, plan, redisstore.WithPrefix(p), redisstore.WithTimeout(10*time.Second))
				},
				CacheTTL: time.Hour,
			})
			if err != nil {
				b.Fatal(err)
			}
			return l
		}
		plain, err := alg.redis(s, plans[0], redisstore.WithPrefix(prefix(b)), redisstore.WithTimeout(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		p := prefix(b)
		one := newPlans(p, plans[0])
		p = prefix(b)
		two := [2]*floodgate.PlanLimiter{newPlans(p, plans[0]), newPlans(p, plans[1])}
		cases := []struct {
			name   string
			decide func(ctx context.Context, i int) error
		}{
			{"plain", func(ctx context.Context, i int) error {
				_, err := plain.AllowN(ctx, benchKeyNames[i%benchKeys], 1)
				return err
			}},
			{"plan", func(ctx context.Context, i int) error {
				_, err := one.AllowN(ctx, benchKeyNames[i%benchKeys], 1)
				return err
			}},
			{"plan-switching", func(ctx context.Context, i int) error {
				// Each key alternates between the two plans, decision by
				// decision (i/benchKeys rounds over the keys).
				_, err := two[(i/benchKeys)%2].AllowN(ctx, benchKeyNames[i%benchKeys], 1)
				return err
			}},
		}
		for _, c := range cases {
			b.Run(alg.name+"/"+c.name, func(b *testing.B) {
				ctx := context.Background()
				for i := range benchKeys { // populate, on the first plan
					if err := c.decide(ctx, i); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := redistest.Do(addr, "CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if err := c.decide(ctx, benchKeys+i); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				calls, usec := evalshaStats(b, addr)
				if calls > 0 {
					b.ReportMetric(float64(usec)/float64(calls), "server-µs/call")
					b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
				}
			})
		}
	}
}

// evalshaStats returns EVALSHA's calls and microseconds from INFO
// commandstats.
func evalshaStats(b testing.TB, addr string) (calls, usec int64) {
	b.Helper()
	info, err := redistest.Info(addr, "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	if calls == 0 {
		b.Logf("no EVALSHA in %q", fmt.Sprint(len(info)))
	}
	return calls, usec
}
