package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// rateSetter is a Redis limiter whose rate can change.
type rateSetter interface {
	limiter
	SetRate(ctx context.Context, c floodgate.RateChange) error
}

// recordHook runs onRecord after each reply to a read or write of a rate
// record (a key ending in ":rate:<kind>"), before the limiter reads it.
type recordHook struct {
	redisstore.Scripter
	onRecord func()
}

func (h recordHook) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	r, err := h.Scripter.EvalSha(ctx, sha, keys, args)
	h.after(keys, err)
	return r, err
}

func (h recordHook) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	r, err := h.Scripter.Eval(ctx, src, keys, args)
	h.after(keys, err)
	return r, err
}

func (h recordHook) after(keys []string, err error) {
	if err == nil && len(keys) == 1 && strings.Contains(keys[0], ":rate:") {
		h.onRecord()
	}
}

// TestRateChurnNeverOpensTheGate: a decision that meets a new rate at
// every try (another instance changes the rate, and decides the key under
// it, each time this one has read the record) gives up after its bounded
// tries. It must not come back as an error, which fail-open and a
// fallback answer for: no option switches the limit off, and whoever can
// keep a rate moving (a plan that flips) would pass uncounted. It is a
// busy denial (Overloaded, 503 with Retry-After), which the deny cache
// does not keep. Before, fail-open ran the handler for every such
// request, and the fallback answered for Redis.
func TestRateChurnNeverOpensTheGate(t *testing.T) {
	addr := redistest.Shared(t)
	r := floodgate.Rate{Limit: 100, Period: time.Hour}
	variants := []struct {
		name     string
		opts     []redisstore.Option
		fallback bool
	}{
		{"plain", nil, false},
		{"deny cache", []redisstore.Option{redisstore.WithDenyCache(1024)}, false},
		{"fallback", nil, true},
	}
	for _, c := range clients(t, addr) {
		for _, a := range algos {
			for _, v := range variants {
				t.Run(c.name+"/"+a.name+"/"+v.name, func(t *testing.T) {
					p := prefix(t)
					other := a.mustNew(t, c.s, r, redisstore.WithPrefix(p), redisstore.WithRateRefresh(time.Millisecond), patient).(rateSetter)
					var changes atomic.Int64
					churn := func() {
						// Flip the limit and decide the key under the new rate,
						// so that this instance's next try meets a newer state.
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						k := changes.Add(1)
						if err := other.SetRate(ctx, floodgate.RateChange{Rate: floodgate.Rate{Limit: r.Limit + int(k%2), Period: r.Period}}); err != nil {
							t.Errorf("SetRate: %v", err)
						}
						if _, err := other.AllowN(ctx, "victim", 1); err != nil {
							t.Errorf("the other instance's decision: %v", err)
						}
					}
					opts := append([]redisstore.Option{redisstore.WithPrefix(p), redisstore.WithRateRefresh(200 * time.Millisecond), patient}, v.opts...)
					fallback := &countingLimiter{Limiter: allowAll{}}
					if v.fallback {
						opts = append(opts, redisstore.WithFallback(fallback))
					}
					l := a.mustNew(t, recordHook{c.s, churn}, r, opts...)

					d, err := l.AllowN(context.Background(), "victim", 1)
					if err != nil {
						t.Fatalf("AllowN: %v; want a denial without an error", err)
					}
					want := floodgate.Decision{Overloaded: true, Limit: l.(floodgate.Capacitor).Capacity(),
						RetryAfter: 200 * time.Millisecond, ResetAfter: 200 * time.Millisecond}
					if d != want {
						t.Fatalf("decision %+v, want %+v", d, want)
					}

					mw, err := floodgate.NewMiddleware(l, floodgate.WithFailOpen(),
						floodgate.WithKeyFunc(func(*http.Request) (string, error) { return "victim", nil }))
					if err != nil {
						t.Fatal(err)
					}
					ran := 0
					h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran++ }))
					for i := range 3 {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
						if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
							t.Fatalf("request %d: status %d, Retry-After %q; want 503 and 1", i, rec.Code, rec.Header().Get("Retry-After"))
						}
					}
					if ran != 0 {
						t.Fatalf("the handler ran %d times under fail-open; want 0", ran)
					}
					if n := fallback.calls.Load(); n != 0 {
						t.Fatalf("the fallback answered %d decisions; want 0 (Redis answered)", n)
					}
					st := l.(interface{ Stats() redisstore.Stats }).Stats()
					if st.ChurnDenials != 4 || st.DenyCacheHits != 0 || st.OtherErrors != 0 || st.FallbackActive {
						t.Fatalf("stats %+v; want 4 churn denials, no deny-cache hit, no error, no fallback", st)
					}
					// Each decision met a new rate at every try.
					if n := changes.Load(); n < 4*4 {
						t.Fatalf("%d changes of rate for 4 decisions; the test did not churn", n)
					}
				})
			}
		}
	}
}
