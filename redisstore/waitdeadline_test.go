package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
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

// stalledReplicaMaster starts a master at Redis's default hz (10: WAIT's
// timeout is checked only every 100 ms on an idle server) with one
// replica that is connected but acknowledges nothing (SIGSTOP), and
// returns a go-redis and a rueidis Scripter on it, each waiting for that
// replica for wait after every batch.
func stalledReplicaMaster(t *testing.T, master *redistest.Server, wait time.Duration) []client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{master.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return []client{
		{"go-redis", goredisstore.New(rdb, goredisstore.WithWaitReplicas(1, wait))},
		{"rueidis", rueidisstore.New(rc, rueidisstore.WithWaitReplicas(1, wait))},
	}
}

// decisionTimeout is the decision timeout of the WAIT tests: 5 times the
// default, so that a round trip slowed by a machine loaded with parallel
// builds does not time a decision out by itself (seen at 100 and 250 ms
// under -count=20), while the sweep below keeps the review's ratios of
// WAIT timeout to decision timeout.
const decisionTimeout = 500 * time.Millisecond

// waitSweep is the WAIT timeouts TestWaitReplicasTimeoutSweep tries: a
// tenth, a half, 0.8, 1 and 5 times the decision timeout, as the review
// tried 10, 50, 80, 100 and 500 ms against the default 100 ms.
var waitSweep = []time.Duration{decisionTimeout / 10, decisionTimeout / 2, decisionTimeout * 8 / 10,
	decisionTimeout, 5 * decisionTimeout}

// TestWaitReplicasTimeoutSweep (issue 18, item 2, second round): with
// WithWaitReplicas and a stopped replica, a WAIT timeout at or above the
// decision timeout (100 ms by default) held the script's reply — a denial
// — past the caller's deadline: the decision failed as a timeout, and
// fail-open or the fallback let it through (11 of 11 at WAIT 100 ms and
// 500 ms, 10 of 11 at 80 ms, some even at 10 ms, since Redis checks WAIT's
// timeout only every 100 ms at hz 10). Now WAIT is bounded by each call's
// remaining deadline and the client stops waiting for it in time: at every
// WAIT setting (scaled to a 500 ms decision timeout), on both clients,
// under fail-open and with a fallback that allows everything, the one
// allowed request runs the handler (charged on the master, reported
// ErrNotReplicated) and every other request is a 429.
func TestWaitReplicasTimeoutSweep(t *testing.T) {
	master := redistest.Start(t)
	if err := redistest.StartReplica(t, master).Pause(); err != nil {
		t.Fatal(err)
	}
	const requests = 4
	for _, wait := range waitSweep {
		for _, c := range stalledReplicaMaster(t, master, wait) {
			for _, fb := range []bool{false, true} {
				name := fmt.Sprintf("wait=%v/%s", wait, c.name)
				opts := []redisstore.Option{redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(decisionTimeout)}
				if fb {
					name += "/fallback"
					opts = append(opts, redisstore.WithFallback(allowAll{}))
				}
				t.Run(name, func(t *testing.T) {
					// A second attempt, on fresh keys, only if the first
					// let more than one request through: on a machine
					// stalled past the decision timeout a script's own
					// round trip can time out, which fail-open rightly
					// passes. The attack (WAIT turning a denial into a
					// timeout) fails both attempts, every time.
					var failure string
					for attempt := range 2 {
						rec := &errRecorder{Scripter: c.s}
						opts := append(opts[1:len(opts):len(opts)], redisstore.WithPrefix(fmt.Sprintf("%s:%d", prefix(t), attempt)))
						l, err := redisstore.NewTokenBucket(rec, floodgate.PerHour(1), opts...)
						if err != nil {
							t.Fatal(err)
						}
						ran, statuses := failOpenRequests(t, l, requests)
						if ran == 1 && statuses[http.StatusTooManyRequests] == requests-1 {
							return
						}
						failure += fmt.Sprintf("\nattempt %d: handler ran %d times, statuses %v; the Scripter's errors: %v",
							attempt+1, ran, statuses, rec.errors())
					}
					t.Fatalf("WAIT %v: want the handler to run once and %d × 429:%s", wait, requests-1, failure)
				})
			}
		}
	}
}

// failOpenRequests sends n requests of one client through a fail-open
// middleware on l, one after the other, and returns how often the handler
// ran and the statuses.
func failOpenRequests(t *testing.T, l floodgate.Limiter, n int) (ran int, statuses map[int]int) {
	t.Helper()
	mw, err := floodgate.NewMiddleware(l, floodgate.WithFailOpen(),
		floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "victim", nil }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
	statuses = map[int]int{}
	for i := 0; i < n; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
		statuses[rec.Code]++
	}
	return ran, statuses
}

// TestWaitReplicasConcurrentDenials: the same attack from 16 concurrent
// callers, whose calls share batches (group commit) and so one WAIT, with
// a WAIT timeout of 5 times the decision timeout: each batch's WAIT is
// bounded by the earliest deadline among its callers, a caller whose
// deadline passes while its batch still waits for WAIT gets its script's
// reply all the same, and under fail-open the handler runs exactly once on
// a quota of 1.
func TestWaitReplicasConcurrentDenials(t *testing.T) {
	master := redistest.Start(t)
	if err := redistest.StartReplica(t, master).Pause(); err != nil {
		t.Fatal(err)
	}
	const callers, each = 16, 3
	for _, c := range stalledReplicaMaster(t, master, 5*decisionTimeout) {
		t.Run(c.name, func(t *testing.T) {
			rec := &errRecorder{Scripter: c.s}
			l, err := redisstore.NewSlidingLog(rec, floodgate.PerHour(1), redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(decisionTimeout))
			if err != nil {
				t.Fatal(err)
			}
			mw, err := floodgate.NewMiddleware(l, floodgate.WithFailOpen(),
				floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "victim", nil }))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			ran, statuses := 0, map[int]int{}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				mu.Lock()
				ran++
				mu.Unlock()
			}))
			var wg sync.WaitGroup
			for g := 0; g < callers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/login", nil))
						mu.Lock()
						statuses[rec.Code]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if ran != 1 || statuses[http.StatusTooManyRequests] != callers*each-1 {
				t.Fatalf("handler ran %d times, statuses %v; want 1 and %d × 429; the Scripter's errors: %v", ran, statuses, callers*each-1, rec.errors())
			}
		})
	}
}

// errRecorder is a Scripter that records the errors (but NOSCRIPT) its
// calls return, and how long each took, so that a failed WAIT test says
// what failed.
type errRecorder struct {
	redisstore.Scripter
	mu   sync.Mutex
	errs []string
}

func (r *errRecorder) EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error) {
	start := time.Now()
	reply, err := r.Scripter.EvalSha(ctx, sha1, keys, args)
	r.record(start, err)
	return reply, err
}

func (r *errRecorder) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	start := time.Now()
	reply, err := r.Scripter.Eval(ctx, script, keys, args)
	r.record(start, err)
	return reply, err
}

func (r *errRecorder) record(start time.Time, err error) {
	if err == nil || errors.Is(err, redisstore.ErrNoScript) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf("%v after %v", err, time.Since(start).Round(time.Millisecond)))
}

func (r *errRecorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}
