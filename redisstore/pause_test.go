//go:build unix

package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// The figures of the fault test. The Redis timeout is twice the default:
// at 50 ms a healthy server on a loaded machine (2 shared cores, -race)
// now and then missed it, which blurs the healthy phase. The outages last
// four timeouts.
const (
	faultTimeout   = 200 * time.Millisecond
	faultProbe     = 50 * time.Millisecond
	faultOutage    = 800 * time.Millisecond // paused, then killed
	faultHealthy   = 200 * time.Millisecond
	faultTail      = 300 * time.Millisecond // load kept up after recovery
	faultRecovery  = 10 * time.Second       // the bound on recovery
	faultWorkers   = 8
	faultPerWorker = 20000 // requests per worker and phase, at most
	faultPace      = time.Millisecond
	redisBurst     = 50 // the Redis bucket, per phase key
	localBurst     = 20 // the fallback's bucket, per phase key
)

// source is who decided a request.
type source int

const (
	fromRedis source = iota
	fromLocal        // the WithFallback limiter
	fromError        // nobody: the middleware's error policy answered
)

func (s source) String() string { return [...]string{"redis", "local", "error"}[s] }

// outcome travels in a request's context: the key to count it under, and
// what the fallback and the decision hook saw. One goroutine serves one
// request, so it needs no lock.
type outcome struct {
	key      string
	fallback bool
	err      error
}

type outcomeKey struct{}

func outcomeOf(ctx context.Context) *outcome {
	o, _ := ctx.Value(outcomeKey{}).(*outcome)
	return o
}

// markingLimiter is a fallback that marks the requests it answers.
type markingLimiter struct{ floodgate.Limiter }

func (m markingLimiter) AllowN(ctx context.Context, key string, n int) (floodgate.Decision, error) {
	if o := outcomeOf(ctx); o != nil {
		o.fallback = true
	}
	return m.Limiter.AllowN(ctx, key, n)
}

// errorPolicy is one way for the middleware to handle a store failure.
type errorPolicy struct {
	name string
	// errStatus is the answer when no decision could be made; 0 if the
	// policy must never see an error (the fallback answers instead).
	errStatus int
	// outage is the only source allowed while the server is paused or down.
	outage source
	mw     []floodgate.MiddlewareOption
	fb     bool
}

var errorPolicies = []errorPolicy{
	{name: "fail-closed", errStatus: http.StatusServiceUnavailable, outage: fromError},
	{name: "fail-open", errStatus: http.StatusOK, outage: fromError, mw: []floodgate.MiddlewareOption{floodgate.WithFailOpen()}},
	{name: "fallback", outage: fromLocal, fb: true},
}

// TestPauseKillRestartUnderLoad runs each error policy, with each client,
// through five phases under concurrent requests to a middleware: healthy;
// server paused (SIGSTOP) for several decision timeouts; resumed; killed;
// restarted. While the server cannot answer every response is the policy's
// (503 when failing closed, 2xx when failing open, the local limiter's
// 2xx/429 with a fallback); when it is back, decisions return to Redis
// within a bound, and the time that takes is reported. Nothing panics, and
// once the clients are closed no goroutine is left.
//
// Every limiter runs on a frozen clock and every phase counts under its own
// key, so the number of requests a bucket lets through is exact.
func TestPauseKillRestartUnderLoad(t *testing.T) {
	verifyNoLeaks(t)
	for _, pol := range errorPolicies {
		for _, cl := range []struct {
			name string
			new  func(testing.TB, string) client
		}{{"go-redis", goRedis}, {"rueidis", rueidisClient}} {
			t.Run(pol.name+"/"+cl.name, func(t *testing.T) {
				srv := redistest.Start(t)
				faultPhases(t, srv, cl.new(t, srv.Addr), pol)
			})
		}
	}
}

func faultPhases(t *testing.T, srv *redistest.Server, c client, pol errorPolicy) {
	t0 := time.Unix(1_800_000_000, 0)
	frozen := func() time.Time { return t0 }
	opts := []redisstore.Option{
		redisstore.WithPrefix(prefix(t)), redisstore.WithTimeout(faultTimeout), redisstore.WithClock(frozen),
	}
	if pol.fb {
		mem, err := floodgate.NewTokenBucket(floodgate.PerMinute(localBurst), floodgate.WithClock(frozen))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, redisstore.WithFallback(markingLimiter{mem}), redisstore.WithProbeInterval(faultProbe))
	}
	l, err := redisstore.NewTokenBucket(c.s, floodgate.PerMinute(redisBurst), opts...)
	if err != nil {
		t.Fatal(err)
	}
	mwOpts := append([]floodgate.MiddlewareOption{
		floodgate.WithKeyFunc(func(r *http.Request) (string, error) { return outcomeOf(r.Context()).key, nil }),
		floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) { outcomeOf(ev.Request.Context()).err = ev.Err }),
	}, pol.mw...)
	mw, err := floodgate.NewMiddleware(l, mwOpts...)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))

	var stats []*phaseStats
	run := func(name string, kind phaseKind) *phaseStats {
		s := runPhase(h, pol, name, kind)
		stats = append(stats, s)
		return s
	}
	healthy := run("healthy", steady)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := run("paused", outage)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := run("resumed", recovering)
	srv.Stop()
	killed := run("killed", outage)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := run("restarted", recovering)

	t.Logf("%s over %s (timeout %s, outages %s, %d workers):\n%s",
		pol.name, c.name, faultTimeout, faultOutage, faultWorkers, summary(stats))
	for _, s := range stats {
		if s.requests < faultWorkers {
			t.Errorf("%s: only %d requests", s.name, s.requests)
		}
		if s.bad > 0 {
			t.Errorf("%s: %d answers outside the policy, first: %s", s.name, s.bad, s.firstBad)
		}
	}
	// All decided on a frozen clock under a fresh key: exact counts.
	if want := min(redisBurst, healthy.requests); healthy.allowed[fromRedis] != want {
		t.Errorf("healthy: Redis allowed %d, want %d", healthy.allowed[fromRedis], want)
	}
	if pol.fb {
		for _, s := range []*phaseStats{paused, killed} {
			if want := min(localBurst, s.requests); s.allowed[fromLocal] != want {
				t.Errorf("%s: the fallback allowed %d, want %d", s.name, s.allowed[fromLocal], want)
			}
		}
	}
	for _, s := range []*phaseStats{resumed, restarted} {
		if s.recovery < 0 {
			t.Errorf("%s: no decision came from Redis within %s", s.name, faultRecovery)
		}
		// The phase runs faultTail past the first decision from Redis: by
		// then the breaker must have closed and the fallback gone quiet.
		if s.lastFB > s.recovery+faultTail/2 {
			t.Errorf("%s: the fallback still answered %s after the start, Redis first answered after %s",
				s.name, s.lastFB, s.recovery)
		}
		// Commands that timed out may still have run once the server was
		// back, so these are bounds, not counts.
		if s.allowed[fromRedis] > redisBurst || s.allowed[fromLocal] > localBurst {
			t.Errorf("%s: allowed %v, more than the buckets hold", s.name, s.allowed)
		}
	}
}

// phaseKind says which answers a phase allows.
type phaseKind int

const (
	steady     phaseKind = iota // every decision from Redis
	outage                      // none from Redis: the policy's answer only
	recovering                  // any source, until Redis decides again
)

// phaseStats are one phase's figures.
type phaseStats struct {
	name     string
	requests int
	status   map[int]int
	sources  [3]int
	allowed  [3]int        // 2xx answers by source
	recovery time.Duration // to the first decision from Redis; -1 if none or not measured
	lastFB   time.Duration // to the end of the fallback's last decision; -1 if none
	bad      int
	firstBad string
}

// runPhase sends requests from faultWorkers goroutines, each bounded by
// faultPerWorker requests, until the phase ends: after faultHealthy or
// faultOutage, or for a recovering phase faultTail after the first
// decision from Redis (at most faultRecovery).
func runPhase(h http.Handler, pol errorPolicy, name string, kind phaseKind) *phaseStats {
	start := time.Now()
	length := faultOutage
	switch kind {
	case steady:
		length = faultHealthy
	case recovering:
		length = faultRecovery
	}
	var end, firstRedis, lastFB atomic.Int64 // ns since start; 0 = not yet
	end.Store(int64(length))
	total := &phaseStats{name: name, status: map[int]int{}, recovery: -1, lastFB: -1}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < faultWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &phaseStats{status: map[int]int{}}
			for i := 0; i < faultPerWorker && time.Since(start) < time.Duration(end.Load()); i++ {
				o := &outcome{key: name}
				status, panicked := serveOnce(h, o)
				src := fromRedis
				switch {
				case o.err != nil:
					src = fromError
				case o.fallback:
					src = fromLocal
				}
				s.requests++
				s.status[status]++
				s.sources[src]++
				if status/100 == 2 {
					s.allowed[src]++
				}
				if why := judge(pol, kind, src, status, panicked, o.err); why != "" {
					if s.bad == 0 {
						s.firstBad = why
					}
					s.bad++
				}
				if kind == recovering {
					at := int64(time.Since(start))
					switch src {
					case fromRedis:
						if firstRedis.CompareAndSwap(0, at) {
							end.Store(at + int64(faultTail))
						}
					case fromLocal:
						for last := lastFB.Load(); at > last && !lastFB.CompareAndSwap(last, at); last = lastFB.Load() {
						}
					}
				}
				time.Sleep(faultPace)
			}
			mu.Lock()
			defer mu.Unlock()
			total.requests += s.requests
			for k, v := range s.status {
				total.status[k] += v
			}
			for i := range s.sources {
				total.sources[i] += s.sources[i]
				total.allowed[i] += s.allowed[i]
			}
			if s.bad > 0 && total.bad == 0 {
				total.firstBad = s.firstBad
			}
			total.bad += s.bad
		}()
	}
	wg.Wait()
	if at := firstRedis.Load(); at > 0 {
		total.recovery = time.Duration(at)
	}
	if at := lastFB.Load(); at > 0 {
		total.lastFB = time.Duration(at)
	}
	return total
}

// serveOnce serves one request for o's key and returns the status, or
// reports a panic.
func serveOnce(h http.Handler, o *outcome) (status int, panicked any) {
	defer func() { panicked = recover() }()
	r := httptest.NewRequest(http.MethodGet, "/probe", nil)
	r = r.WithContext(context.WithValue(r.Context(), outcomeKey{}, o))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, nil
}

// judge returns why an answer breaks the policy, or "".
func judge(pol errorPolicy, kind phaseKind, src source, status int, panicked any, err error) string {
	if panicked != nil {
		return fmt.Sprintf("panic: %v", panicked)
	}
	switch {
	case src == fromError && pol.errStatus == 0:
		return fmt.Sprintf("an error reached the middleware despite the fallback: %v", err)
	case src == fromError && status != pol.errStatus:
		return fmt.Sprintf("status %d on error %v, want %d", status, err, pol.errStatus)
	case src != fromError && status != http.StatusOK && status != http.StatusTooManyRequests:
		return fmt.Sprintf("status %d from %s, want 200 or 429", status, src)
	case kind == steady && src != fromRedis:
		return fmt.Sprintf("decided by %s on a healthy server (%v)", src, err)
	case kind == outage && src != pol.outage:
		return fmt.Sprintf("decided by %s while the server could not answer, want %s", src, pol.outage)
	}
	return ""
}

// summary formats one line per phase.
func summary(stats []*phaseStats) string {
	var b strings.Builder
	for _, s := range stats {
		codes := make([]int, 0, len(s.status))
		for c := range s.status {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		var st []string
		for _, c := range codes {
			st = append(st, fmt.Sprintf("%d×%d", c, s.status[c]))
		}
		fmt.Fprintf(&b, "  %-9s %5d requests  status %-22s  redis %5d  local %5d  error %5d",
			s.name, s.requests, strings.Join(st, " "), s.sources[fromRedis], s.sources[fromLocal], s.sources[fromError])
		if s.recovery >= 0 {
			fmt.Fprintf(&b, "  first from Redis after %s", s.recovery.Round(time.Millisecond))
		}
		if s.lastFB >= 0 {
			fmt.Fprintf(&b, ", last from the fallback after %s", s.lastFB.Round(time.Millisecond))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
