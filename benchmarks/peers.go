package benchmarks

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/didip/tollbooth/v7"
	tollboothlimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	"github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/floodgate-go/floodgate"
)

// quota is the policy every library is given in a case: limit events per
// period, with a burst of limit.
type quota struct {
	limit  int
	period time.Duration
}

var (
	// allowQuota never denies: 16 million events per 320 ms refills one
	// event every 20 ns, faster than any library decides on one key, so
	// the "allowed" cases stay allowed however long they run. The burst
	// (320 ms worth) absorbs a goroutine descheduled between reading the
	// clock and deciding: a GCRA peer denies a caller whose clock reading
	// is older than its burst, which on a loaded machine happened with 16
	// ms. floodgate's cap on a limit (2^24) bounds the burst.
	allowQuota = quota{limit: 16_000_000, period: 320 * time.Millisecond}
	// denyQuota allows one event an hour: after one priming call on a key,
	// every call is denied for the rest of the run.
	denyQuota = quota{limit: 1, period: time.Hour}
	// drainQuota is spent by the calls, as a real per-client quota is
	// (issue 31): 16 million per 30 days refills about 6 events a second,
	// so a key's remaining count changes on every call it makes; the
	// populated keys are made to stand apart (instance.spend), so that
	// consecutive calls of different keys differ too.
	drainQuota = quota{limit: 16_000_000, period: 30 * 24 * time.Hour}
	// memQuota is the username-probe policy of the design, 10 per 10
	// minutes: what a tracked key typically holds.
	memQuota = quota{limit: 10, period: 10 * time.Minute}
)

// boundedKeys is the key bound given to every library that has one. It is
// floodgate's default, and above the 100,000 keys of the populated cases,
// so that no bounded store evicts during a measurement.
const boundedKeys = floodgate.DefaultMaxKeys

// minWindow is the shortest window given to fixed-window libraries. Their
// state is forgotten when a window ends (httprate clears its maps, ulule's
// counters expire), so a millisecond window would empty the "populated"
// key set a thousand times a second; instead they get the same average
// rate over an hour.
const minWindow = time.Hour

// window returns q as a fixed window of at least minWindow with the same
// average rate.
func (q quota) window() (int64, time.Duration) {
	if q.period >= minWindow {
		return int64(q.limit), q.period
	}
	return int64(q.limit) * int64(minWindow/q.period), minWindow
}

// perSecond returns q's refill rate in events per second, for libraries
// built on golang.org/x/time/rate.
func (q quota) perSecond() float64 { return float64(q.limit) / q.period.Seconds() }

// caller makes one decision for key. It is not safe for concurrent use;
// each goroutine takes its own from instance.newCaller.
type caller func(key string) (allowed bool, err error)

// instance is one library's limiter, built for one quota.
type instance struct {
	newCaller func() caller
	// handler wraps next in the library's HTTP middleware, keyed by the
	// client IP as the library documents.
	handler func(next http.Handler) http.Handler
	// stop ends background goroutines, if the library runs any.
	stop func()
	// spend takes n units from key at once, for the draining cases; nil
	// for a library whose cost does not depend on the values its state
	// holds (it formats its headers anew on every request, or sends
	// none), where spending apart changes nothing.
	spend func(key string, n int) error
}

// peer is a library under comparison.
type peer struct {
	name string
	// maxKeys is the hard bound of the library's in-memory key store as
	// configured here, 0 if it has none.
	maxKeys int
	build   func(q quota) (instance, error)
}

// peers returns every in-memory library, floodgate first.
func peers() []peer {
	return []peer{
		{name: "floodgate", maxKeys: boundedKeys, build: buildFloodgate},
		{name: "baseline", maxKeys: boundedKeys, build: buildBaseline},
		{name: "httprate", build: buildHTTPRate},
		{name: "ulule", build: buildUlule},
		{name: "sethvargo", build: buildSethvargo},
		{name: "throttled", maxKeys: boundedKeys, build: buildThrottled},
		{name: "tollbooth", build: buildTollbooth},
	}
}

func noStop() {}

// buildFloodgate: a TokenBucket with its defaults (bounded store of
// DefaultMaxKeys keys, monotonic clock) behind NewMiddleware with its
// defaults: keyed by the TCP peer's IP (KeyByIP), IETF RateLimit headers,
// an RFC 9457 problem body on 429.
func buildFloodgate(q quota) (instance, error) {
	tb, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: q.limit, Period: q.period})
	if err != nil {
		return instance{}, err
	}
	mw, err := floodgate.NewMiddleware(tb)
	if err != nil {
		return instance{}, err
	}
	ctx := context.Background()
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) {
				d, err := tb.Allow(ctx, key)
				return d.Allowed, err
			}
		},
		handler: mw,
		stop:    noStop,
		spend: func(key string, n int) error {
			_, err := tb.AllowN(ctx, key, n)
			return err
		},
	}, nil
}

// buildBaseline: the limiter a Go developer writes by hand.
func buildBaseline(q quota) (instance, error) {
	bl, err := newBaseline(q.perSecond(), q.limit, boundedKeys)
	if err != nil {
		return instance{}, err
	}
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) { return bl.allow(key), nil }
		},
		handler: bl.middleware,
		stop:    noStop,
	}, nil
}

// httpRateKey keys by the TCP peer, canonicalized as httprate's README
// recommends (there chi's ClientIPFromRemoteAddr resolves the address; this
// is the same without the chi dependency).
func httpRateKey(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", err
	}
	return httprate.CanonicalizeIP(host), nil
}

// buildHTTPRate: httprate's local sliding-window counter. It has no
// decision API apart from OnLimit, which also writes its X-RateLimit
// headers to a ResponseWriter; the decision cases call that.
func buildHTTPRate(q quota) (instance, error) {
	n, w := q.window()
	rl := httprate.NewRateLimiter(int(n), w, httprate.WithKeyFuncs(httpRateKey))
	return instance{
		newCaller: func() caller {
			rec := newRecorder()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			return func(key string) (bool, error) {
				return !rl.OnLimit(rec, r, key), nil
			}
		},
		handler: rl.Handler,
		stop:    noStop,
	}, nil
}

// buildUlule: ulule/limiter with its in-memory store and stdlib middleware,
// keyed by its default IP key getter (RemoteAddr, forward headers not
// trusted).
func buildUlule(q quota) (instance, error) {
	n, w := q.window()
	lim := ulule.New(memory.NewStore(), ulule.Rate{Period: w, Limit: n})
	ctx := context.Background()
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) {
				c, err := lim.Get(ctx, key)
				return !c.Reached, err
			}
		},
		handler: stdlib.NewMiddleware(lim).Handler,
		stop:    noStop,
	}, nil
}

// buildSethvargo: sethvargo/go-limiter's memorystore and httplimit keyed
// by httplimit.IPKeyFunc() (RemoteAddr only).
func buildSethvargo(q quota) (instance, error) {
	n, w := q.window()
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(n), Interval: w})
	if err != nil {
		return instance{}, err
	}
	mw, err := httplimit.NewMiddleware(st, httplimit.IPKeyFunc())
	if err != nil {
		return instance{}, err
	}
	ctx := context.Background()
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) {
				_, _, _, ok, err := st.Take(ctx, key)
				return ok, err
			}
		},
		handler: mw.Handle,
		stop:    func() { _ = st.Close(ctx) },
	}, nil
}

// buildThrottled: throttled's GCRA limiter on its LRU-bounded memstore,
// varied by RemoteAddr. Its MaxBurst counts the events allowed beyond the
// first, hence limit-1 for a capacity of limit.
func buildThrottled(q quota) (instance, error) {
	st, err := memstore.NewCtx(boundedKeys)
	if err != nil {
		return instance{}, err
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(q.limit, q.period),
		MaxBurst: q.limit - 1,
	})
	if err != nil {
		return instance{}, err
	}
	hl := &throttled.HTTPRateLimiterCtx{RateLimiter: rl, VaryBy: &throttled.VaryBy{RemoteAddr: true}}
	ctx := context.Background()
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) {
				limited, _, err := rl.RateLimitCtx(ctx, key, 1)
				return !limited, err
			}
		},
		handler: hl.RateLimit,
		stop:    noStop,
	}, nil
}

// buildTollbooth: tollbooth v7 with expirable buckets (one hour, as in its
// README) and the client IP taken from RemoteAddr only: its default list
// believes X-Forwarded-For first, which a direct client can forge.
func buildTollbooth(q quota) (instance, error) {
	lmt := tollbooth.NewLimiter(q.perSecond(), &tollboothlimiter.ExpirableOptions{DefaultExpirationTTL: time.Hour})
	lmt.SetBurst(q.limit)
	lmt.SetIPLookups([]string{"RemoteAddr"})
	return instance{
		newCaller: func() caller {
			return func(key string) (bool, error) { return !lmt.LimitReached(key), nil }
		},
		handler: func(next http.Handler) http.Handler { return tollbooth.LimitHandler(lmt, next) },
		stop:    noStop,
	}, nil
}

// recorder is a ResponseWriter that keeps only the status and the header
// map, so that a middleware case measures the middleware and not a
// response buffer. reset clears the map without freeing it.
type recorder struct {
	header http.Header
	code   int
}

func newRecorder() *recorder { return &recorder{header: make(http.Header)} }

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// status returns the status the handler chose, 200 if it wrote nothing.
func (w *recorder) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *recorder) reset() {
	clear(w.header)
	w.code = 0
}

// clientIP returns the i-th distinct IPv4 address of 10.0.0.0/8 as a
// string, newly allocated.
func clientIP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i))
}
