package redisstore_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// unackedMaster starts a master with one replica that is connected but
// acknowledges nothing (stopped with SIGSTOP), and returns a go-redis and
// a rueidis Scripter on the master, each waiting for one replica for
// 10 ms after every batch. The master runs at hz 100, so WAIT's timeout
// is checked every 10 ms instead of every 100.
func unackedMaster(t *testing.T) []client {
	t.Helper()
	master := redistest.Start(t, "--hz", "100")
	replica := redistest.StartReplica(t, master)
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return []client{
		{"go-redis", goredisstore.New(rdb, goredisstore.WithWaitReplicas(1, 10*time.Millisecond))},
		{"rueidis", rueidisstore.New(rc, rueidisstore.WithWaitReplicas(1, 10*time.Millisecond))},
	}
}

// allowAll is a fallback that allows everything: if a denial from Redis
// ever reached it, the test would see the request through.
type allowAll struct{}

func (allowAll) AllowN(context.Context, string, int) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 1 << 20, Remaining: 1 << 20}, nil
}

// TestWaitReplicasDenialStaysDenial (issue 18, item 2): with
// WithWaitReplicas and a replica that acknowledges nothing, a decision
// Redis denied is a denial, with no error, whatever the replication; only
// an allowed decision, which the master charged, is reported as
// ErrNotReplicated (wrapped in ErrRedis), and never handed to the
// fallback, which would decide a second time. Before, every decision,
// denials included, came back as ErrNotReplicated: fail-open, or a
// fallback, then let every request through.
func TestWaitReplicasDenialStaysDenial(t *testing.T) {
	ctx := context.Background()
	for _, c := range unackedMaster(t) {
		for _, a := range algos {
			for _, fb := range []bool{false, true} {
				name := c.name + "/" + a.name
				if fb {
					name += "/fallback"
				}
				t.Run(name, func(t *testing.T) {
					opts := []redisstore.Option{patient, redisstore.WithPrefix(prefix(t))}
					if fb {
						opts = append(opts, redisstore.WithFallback(allowAll{}))
					}
					l := a.mustNew(t, c.s, floodgate.PerHour(2), opts...)
					for i := 1; i <= 2; i++ {
						d, err := l.AllowN(ctx, "k", 1)
						if !errors.Is(err, redisstore.ErrNotReplicated) || !errors.Is(err, redisstore.ErrRedis) || d.Allowed {
							t.Fatalf("allowed decision %d, not replicated: %+v, %v; want ErrNotReplicated and ErrRedis, not allowed", i, d, err)
						}
					}
					for i := 0; i < 3; i++ {
						d, err := l.AllowN(ctx, "k", 1)
						if err != nil || d.Allowed || d.RetryAfter <= 0 || d.Remaining != 0 {
							t.Fatalf("decision over the quota, not replicated: %+v, %v; want a denial with no error", d, err)
						}
					}
				})
			}
		}
	}
}

// TestWaitReplicasMiddleware is the attack of issue 18, item 2, through
// floodgate's middleware: 11 requests on a quota of 1 with a replica that
// acknowledges nothing. Under fail-open the one allowed decision runs the
// handler (it was charged: the quota is spent either way) and the other
// 10 are 429; under fail-closed it is a 503 and the others 429. Before,
// fail-open ran the handler 11 times.
func TestWaitReplicasMiddleware(t *testing.T) {
	policies := []struct {
		name     string
		opts     []floodgate.MiddlewareOption
		ran      int
		statuses map[int]int
	}{
		{"fail-open", []floodgate.MiddlewareOption{floodgate.WithFailOpen()}, 1, map[int]int{200: 1, 429: 10}},
		{"fail-closed", nil, 0, map[int]int{503: 1, 429: 10}},
	}
	for _, c := range unackedMaster(t) {
		for _, pol := range policies {
			t.Run(c.name+"/"+pol.name, func(t *testing.T) {
				l, err := redisstore.NewSlidingLog(c.s, floodgate.PerHour(1), patient, redisstore.WithPrefix(prefix(t)))
				if err != nil {
					t.Fatal(err)
				}
				opts := append([]floodgate.MiddlewareOption{
					floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "victim", nil }),
				}, pol.opts...)
				mw, err := floodgate.NewMiddleware(l, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ran := 0
				h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
				statuses := map[int]int{}
				for i := 0; i < 11; i++ {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
					statuses[rec.Code]++
				}
				if ran != pol.ran || len(statuses) != len(pol.statuses) {
					t.Fatalf("handler ran %d times, statuses %v; want %d and %v", ran, statuses, pol.ran, pol.statuses)
				}
				for code, n := range pol.statuses {
					if statuses[code] != n {
						t.Fatalf("handler ran %d times, statuses %v; want %d and %v", ran, statuses, pol.ran, pol.statuses)
					}
				}
			})
		}
	}
}
