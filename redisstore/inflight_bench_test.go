package redisstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// BenchmarkInFlight measures a call on an in-flight limit on Redis: its
// take and its release, two round trips, at 1 and 16 callers, on both
// clients — per key over the populated key set, each key also held by a
// long call of another instance, and service-wide, where every caller's
// calls share one key with 64 long calls of another instance. calls/s is throughput; server-µs/call is the
// server's script time per call (INFO commandstats: EVALSHA's and EVAL's
// microseconds over the calls made), on a server of the benchmark's own.
func BenchmarkInFlight(b *testing.B) {
	srv := redistest.Start(b)
	for _, c := range clients(b, srv.Addr) {
		for _, serviceWide := range []bool{false, true} {
			p := prefix(b)
			build, kind := redisstore.NewInFlight, "per-key"
			if serviceWide {
				build, kind = redisstore.NewServiceInFlight, "service"
			}
			l, err := build(c.s, 1<<20, redisstore.WithPrefix(p), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			long, err := build(c.s, 1<<20, redisstore.WithPrefix(p), redisstore.WithTimeout(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer long.Close()
			if serviceWide {
				for range 64 {
					if _, err := long.AllowN(context.Background(), "", 1); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				populate(b, func(ctx context.Context, key string) error {
					_, err := long.AllowN(ctx, key, 1)
					return err
				})
			}
			for _, callers := range []int{1, 16} {
				b.Run(fmt.Sprintf("%s/%s/callers=%d", c.name, kind, callers), func(b *testing.B) {
					if _, err := redistest.Do(srv.Addr, "CONFIG", "RESETSTAT"); err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					start := time.Now()
					var next, failed atomic.Int64
					var wg sync.WaitGroup
					for range callers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							ctx := context.Background()
							for {
								i := next.Add(1)
								if i > int64(b.N) {
									return
								}
								key := benchKeyNames[i%benchKeys]
								d, err := l.AllowN(ctx, key, 1)
								if err == nil && d.Allowed {
									err = l.ReleaseN(ctx, key, 1, time.Millisecond)
								}
								if err != nil || !d.Allowed {
									failed.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					elapsed := time.Since(start)
					b.StopTimer()
					if failed.Load() > 0 {
						b.Fatalf("%d of %d calls failed or were refused", failed.Load(), b.N)
					}
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
					us, _ := scriptMicros(b, srv.Addr)
					b.ReportMetric(us/float64(b.N), "server-µs/call")
				})
			}
		}
	}
}

var cmdstat = regexp.MustCompile(`cmdstat_(evalsha|eval):calls=(\d+),usec=(\d+)`)

// scriptMicros returns the microseconds the server spent in scripts
// since its statistics were reset, and the script calls.
func scriptMicros(b *testing.B, addr string) (us, calls float64) {
	b.Helper()
	info, err := redistest.Info(addr, "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range cmdstat.FindAllStringSubmatch(info, -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		v, _ := strconv.ParseFloat(m[3], 64)
		calls += n
		us += v
	}
	return us, calls
}
