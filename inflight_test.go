package floodgate_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

func mustInFlight(t *testing.T, n int, opts ...floodgate.Option) *floodgate.InFlight {
	t.Helper()
	l, err := floodgate.NewInFlight(n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The decisions of an in-flight limit, step by step: slots taken and
// given back, per key, a cost above the limit, and the table bound.
func TestInFlightSteps(t *testing.T) {
	ctx := context.Background()
	l := mustInFlight(t, 3, floodgate.WithMaxKeys(2), floodgate.WithShards(1))
	steps := []struct {
		do        string // "take", "release"
		key       string
		n         int
		allowed   bool
		remaining int
		overload  bool
		err       error
	}{
		{"take", "ann", 2, true, 1, false, nil},
		{"take", "ann", 2, false, 1, false, nil},
		{"take", "ann", 1, true, 0, false, nil},
		{"take", "ann", 0, true, 0, false, nil},
		{"take", "bob", 3, true, 0, false, nil},
		{"take", "cat", 1, false, 3, true, nil}, // two keys hold slots: the table is full
		{"release", "bob", 3, true, 3, false, nil},
		{"take", "cat", 1, true, 2, false, nil},
		{"take", "ann", 4, false, 0, false, floodgate.ErrCostExceedsLimit},
		{"release", "ann", 5, true, 3, false, nil}, // more than held: all of it
		{"take", "ann", -1, false, 0, false, floodgate.ErrInvalidCost},
	}
	for i, s := range steps {
		if s.do == "release" {
			if err := l.ReleaseN(ctx, s.key, s.n, time.Millisecond); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if got := l.Held(s.key); got != 3-s.remaining {
				t.Fatalf("step %d: %s holds %d, want %d", i, s.key, got, 3-s.remaining)
			}
			continue
		}
		d, err := l.AllowN(ctx, s.key, s.n)
		if !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
			t.Fatalf("step %d: error %v, want %v", i, err, s.err)
		}
		if err != nil && errors.Is(err, floodgate.ErrInvalidCost) {
			continue
		}
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.Overloaded != s.overload || d.Limit != 3 {
			t.Fatalf("step %d (%s %s %d): %+v, want allowed %v, remaining %d, overloaded %v", i, s.do, s.key, s.n, d, s.allowed, s.remaining, s.overload)
		}
		if !d.Allowed && err == nil && d.RetryAfter <= 0 {
			t.Fatalf("step %d: a denial without RetryAfter", i)
		}
	}
}

// The Retry-After of a denial is an estimate from how long slots were
// held: the mean hold (1 s before anything was released) divided by the
// slots the key holds.
func TestInFlightRetryAfterEstimate(t *testing.T) {
	ctx := context.Background()
	l := mustInFlight(t, 2)
	_, _ = l.AllowN(ctx, "ann", 2)
	if d, _ := l.AllowN(ctx, "ann", 1); d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("before any release: retry after %v, want 500ms (1 s ÷ 2 held)", d.RetryAfter)
	}
	_ = l.ReleaseN(ctx, "bob", 0, 400*time.Millisecond) // an observation, nothing held
	if d, _ := l.AllowN(ctx, "ann", 1); d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 400*time.Millisecond {
		t.Fatalf("after a 400 ms hold: retry after %v, reset after %v; want 200ms (400 ms ÷ 2 held), 400ms", d.RetryAfter, d.ResetAfter)
	}
	for range 100 { // the mean moves toward the new holds
		_ = l.ReleaseN(ctx, "bob", 0, 10*time.Millisecond)
	}
	if d, _ := l.AllowN(ctx, "ann", 1); d.RetryAfter < 5*time.Millisecond || d.RetryAfter > 6*time.Millisecond {
		t.Fatalf("after many 10 ms holds: retry after %v, want about 5ms", d.RetryAfter)
	}
}

// Impossible configurations are refused, and options that do not apply.
func TestInFlightOptions(t *testing.T) {
	for name, build := range map[string]func() (*floodgate.InFlight, error){
		"zero":                     func() (*floodgate.InFlight, error) { return floodgate.NewInFlight(0) },
		"above 2^24":               func() (*floodgate.InFlight, error) { return floodgate.NewInFlight(1<<24 + 1) },
		"WithBurst":                func() (*floodgate.InFlight, error) { return floodgate.NewInFlight(5, floodgate.WithBurst(2)) },
		"WithClock":                func() (*floodgate.InFlight, error) { return floodgate.NewInFlight(5, floodgate.WithClock(time.Now)) },
		"WithForgetEvicted":        func() (*floodgate.InFlight, error) { return floodgate.NewInFlight(5, floodgate.WithForgetEvicted()) },
		"service-wide WithMaxKeys": func() (*floodgate.InFlight, error) { return floodgate.NewServiceInFlight(5, floodgate.WithMaxKeys(9)) },
	} {
		if l, err := build(); !errors.Is(err, floodgate.ErrInvalidOption) || l != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption", name, l, err)
		}
	}
}

// inFlightServer serves h behind an in-flight limit of one key (the
// method), counting the requests in the handler at once.
type inFlightServer struct {
	in, peak atomic.Int64
	release  chan struct{}
	entered  chan struct{}
}

func (s *inFlightServer) handler(w http.ResponseWriter, r *http.Request) {
	n := s.in.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	s.entered <- struct{}{}
	defer s.in.Add(-1)
	switch r.URL.Path {
	case "/panic":
		<-s.release
		panic(http.ErrAbortHandler)
	case "/hangup":
		<-r.Context().Done()
	default:
		<-s.release
		w.WriteHeader(http.StatusNoContent)
	}
}

// 100 concurrent requests of one key against an in-flight limit of 5:
// exactly 5 are in the handler at once, the other 95 get 429 at once, and
// when the 5 are done the next 5 get in — on a real server, and also when
// the handlers end by panicking.
func TestInFlightMiddlewareHundredAgainstFive(t *testing.T) {
	for _, path := range []string{"/ok", "/panic"} {
		t.Run(path, func(t *testing.T) {
			lim := mustInFlight(t, 5)
			s := &inFlightServer{release: make(chan struct{}), entered: make(chan struct{}, 100)}
			mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(mw(http.HandlerFunc(s.handler)))
			defer srv.Close()
			for round := 0; round < 2; round++ {
				codes := make(chan int, 100)
				var wg sync.WaitGroup
				for range 100 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// POST: a client retries a GET whose connection
						// breaks off, as the panic does.
						resp, err := srv.Client().Post(srv.URL+path, "text/plain", nil)
						if err != nil {
							codes <- 0
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						codes <- resp.StatusCode
					}()
				}
				counts := map[int]int{}
				for range 95 {
					counts[<-codes]++
				}
				for range 5 {
					<-s.entered
				}
				if counts[http.StatusTooManyRequests] != 95 || s.in.Load() != 5 || lim.Held("POST") != 5 {
					t.Fatalf("round %d: %v with %d in the handler (%d slots held); want 95 × 429 with 5 in", round, counts, s.in.Load(), lim.Held("POST"))
				}
				for range 5 {
					s.release <- struct{}{}
				}
				wg.Wait()
				if got := lim.Held("POST"); got != 0 {
					t.Fatalf("round %d: %d slots still held after the handlers ended", round, got)
				}
			}
			if p := s.peak.Load(); p != 5 {
				t.Errorf("peak in the handler %d, want 5", p)
			}
		})
	}
}

// A client that hangs up while its request is in the handler gets its
// slot back as soon as the handler returns.
func TestInFlightHangUpReleases(t *testing.T) {
	lim := mustInFlight(t, 1)
	s := &inFlightServer{release: make(chan struct{}), entered: make(chan struct{}, 1)}
	mw, err := floodgate.NewMiddleware(lim, floodgate.WithKeyFunc(floodgate.KeyByMethod()))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(s.handler)))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hangup", nil)
	go func() {
		if resp, err := srv.Client().Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-s.entered
	if lim.Held("GET") != 1 {
		t.Fatal("the slot is not held")
	}
	cancel()
	waitFor(t, "the slot to come back", func() bool { return lim.Held("GET") == 0 })
}

// A service-wide cap answers 503 with Retry-After (the service is busy,
// no client is at fault), and the quota headers; the handler is not
// called.
func TestServiceInFlightAnswers503(t *testing.T) {
	lim, err := floodgate.NewServiceInFlight(1)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.AllowN(context.Background(), "someone", 1); !d.Allowed {
		t.Fatal("could not take the only slot")
	}
	ran := false
	h := floodgate.Middleware(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || ran ||
		rec.Header().Get("RateLimit") != `"default";r=0;t=1` || !strings.Contains(body, `"status":503`) {
		t.Errorf("%d %v %s, handler ran %v; want 503, Retry-After 1, RateLimit r=0", rec.Code, rec.Header(), body, ran)
	}
	envelope, _ := floodgate.StaticJSON([]byte(`{"code":"BUSY"}`))
	h = floodgate.Middleware(lim, floodgate.WithDeniedHandler(envelope))(http.NotFoundHandler())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != `{"code":"BUSY"}` {
		t.Errorf("StaticJSON: %d %s, want 503 with the envelope", rec.Code, rec.Body.String())
	}
}

// In a Composite, an in-flight limit and a rate limit go together: a call
// takes a slot and a token; settling releases the slot but keeps the
// token; a call the rate denies holds no slot.
func TestInFlightInComposite(t *testing.T) {
	ctx := context.Background()
	slots := mustInFlight(t, 2)
	tokens := mustTokenBucketX(t, floodgate.PerHour(3))
	both, err := floodgate.All(tokens, slots)
	if err != nil {
		t.Fatal(err)
	}
	var events []floodgate.DecisionEvent
	mw, err := floodgate.NewMiddleware(both, floodgate.WithKeyFunc(floodgate.KeyByMethod()),
		floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) { events = append(events, ev) }))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if got := slots.Held("GET"); got != 1 {
			t.Errorf("in the handler: %d slots held, want 1", got)
		}
	}))
	for i, want := range []int{200, 200, 200, 429} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != want || slots.Held("GET") != 0 {
			t.Errorf("request %d: %d with %d slots held after; want %d, 0", i, rec.Code, slots.Held("GET"), want)
		}
	}
	if d, _ := tokens.AllowN(ctx, "GET", 0); d.Remaining != 0 {
		t.Errorf("%d tokens left, want 0: settling gave tokens back", d.Remaining)
	}
	if len(events) != 4 {
		t.Errorf("%d events, want 4 (no AfterHandler event for a release)", len(events))
	}
}

func mustTokenBucketX(t *testing.T, r floodgate.Rate, opts ...floodgate.Option) *floodgate.TokenBucket {
	t.Helper()
	b, err := floodgate.NewTokenBucket(r, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WithMaxKeys(n) holds n keys holding slots, whatever the shards: n
// distinct keys each taking a slot are all allowed, the next new key is
// refused as Overloaded (a key already in the table is not), and a key
// that gives back its last slot makes room for one more. The bound was
// per shard, so a table with keys hashed unevenly refused new keys at
// 72–76 % of n.
func TestInFlightTableHoldsMaxKeys(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ keys, shards int }{{1000, 0}, {1000, 64}, {4096, 0}, {100, 1}, {7, 4}, {1, 1}} {
		opts := []floodgate.Option{floodgate.WithMaxKeys(c.keys)}
		if c.shards > 0 {
			opts = append(opts, floodgate.WithShards(c.shards))
		}
		l := mustInFlight(t, 2, opts...)
		key := func(i int) string { return "client-" + strconv.Itoa(i) }
		for i := range c.keys {
			if d, err := l.AllowN(ctx, key(i), 1); err != nil || !d.Allowed {
				t.Fatalf("WithMaxKeys(%d), %d shards: key %d of %d refused: %+v %v", c.keys, c.shards, i+1, c.keys, d, err)
			}
		}
		if d, _ := l.AllowN(ctx, "one-more", 1); d.Allowed || !d.Overloaded {
			t.Fatalf("WithMaxKeys(%d): key %d: %+v; want refused, Overloaded", c.keys, c.keys+1, d)
		}
		if d, _ := l.AllowN(ctx, key(0), 1); !d.Allowed {
			t.Fatalf("WithMaxKeys(%d): a key in the full table refused its second slot: %+v", c.keys, d)
		}
		_ = l.ReleaseN(ctx, key(c.keys-1), 2, 0)
		if d, _ := l.AllowN(ctx, "one-more", 1); !d.Allowed {
			t.Fatalf("WithMaxKeys(%d): a new key refused after a key left: %+v", c.keys, d)
		}
		if d, _ := l.AllowN(ctx, "two-more", 1); d.Allowed || !d.Overloaded {
			t.Fatalf("WithMaxKeys(%d): a second new key after one left: %+v; want refused, Overloaded", c.keys, d)
		}
	}
}

// Many goroutines taking and releasing slots of many keys against a small
// table never put more than WithMaxKeys keys in it: 8 workers each hold
// up to 16 keys of their own at once, 128 in all against a bound of 64,
// all asked for at once before they go on at random.
// When they are done the table holds its bound again, no more, no less.
func TestInFlightTableBoundConcurrent(t *testing.T) {
	ctx := context.Background()
	const maxKeys, workers, perWorker, rounds = 64, 8, 16, 3000
	l := mustInFlight(t, 3, floodgate.WithMaxKeys(maxKeys), floodgate.WithShards(8))
	// inTable is at most the keys in the table: a worker counts a key
	// after it entered and uncounts it before it leaves.
	var inTable, peak, full atomic.Int64
	var wg, filled sync.WaitGroup
	filled.Add(workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 30))
			var held []string
			// Every worker first asks for its 16 keys, before any gives
			// one back: 128 asked of a table of 64.
			for i := range rounds {
				if i == perWorker {
					filled.Done()
					filled.Wait()
				}
				if i >= perWorker && len(held) > 0 && (len(held) == perWorker || rng.IntN(4) == 0) {
					j := rng.IntN(len(held))
					k := held[j]
					held[j] = held[len(held)-1]
					held = held[:len(held)-1]
					inTable.Add(-1)
					if err := l.ReleaseN(ctx, k, 1, 0); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				k := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(rng.IntN(1000))
				if slices.Contains(held, k) {
					continue
				}
				d, err := l.AllowN(ctx, k, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					full.Add(1)
					continue
				}
				held = append(held, k)
				n := inTable.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
			}
			for _, k := range held {
				inTable.Add(-1)
				_ = l.ReleaseN(ctx, k, 1, 0)
			}
		}()
	}
	wg.Wait()
	if peak.Load() > maxKeys {
		t.Errorf("%d keys held slots at once, more than the bound %d", peak.Load(), maxKeys)
	}
	if full.Load() == 0 {
		t.Errorf("the table was never full: the test did not press the bound")
	}
	for i := range maxKeys {
		if d, _ := l.AllowN(ctx, "after-"+strconv.Itoa(i), 1); !d.Allowed {
			t.Fatalf("after the run, key %d of %d refused: %+v (the table lost count)", i+1, maxKeys, d)
		}
	}
	if d, _ := l.AllowN(ctx, "after-one-more", 1); d.Allowed {
		t.Fatalf("after the run, key %d allowed: the table holds more than its bound", maxKeys+1)
	}
}

// inFlightBytesPerKey bounds the heap a full per-key in-flight table
// costs per key (the type doc gives it).
const inFlightBytesPerKey = 48

// The table's memory stays bounded by its key bound however many keys
// pass through it: 20 rounds of 65,536 fresh keys, each filling a table of
// 65,536 and leaving it, keep the heap within a tenth of the first round's,
// at most inFlightBytesPerKey a key.
func TestInFlightTableMemoryBounded(t *testing.T) {
	ctx := context.Background()
	const n, rounds = 1 << 16, 20
	before := heapInUse()
	l := mustInFlight(t, 1, floodgate.WithMaxKeys(n))
	var key []byte
	fill := func(round int, release bool) {
		for i := range n {
			key = strconv.AppendInt(append(key[:0], 'r'), int64(round<<20|i), 10)
			if release {
				_ = l.ReleaseN(ctx, string(key), 1, 0)
			} else if d, _ := l.AllowN(ctx, string(key), 1); !d.Allowed {
				t.Fatalf("round %d: key %d of %d refused", round, i+1, n)
			}
		}
	}
	fill(0, false)
	first := heapInUse() - before
	fill(0, true)
	for r := 1; r < rounds; r++ {
		fill(r, false)
		if d, _ := l.AllowN(ctx, "one more", 1); d.Allowed {
			t.Fatalf("round %d: key %d allowed", r, n+1)
		}
		fill(r, true)
	}
	fill(rounds, false)
	last := heapInUse() - before
	runtime.KeepAlive(l)
	t.Logf("%d keys: %d B after the first round (%.1f B/key), %d B after %d rounds", n, first, float64(first)/n, last, rounds)
	if first > n*inFlightBytesPerKey {
		t.Errorf("a full table costs %.1f B a key, more than %d", float64(first)/n, inFlightBytesPerKey)
	}
	if last > first+first/10 {
		t.Errorf("the heap grew from %d B to %d B over %d rounds of fresh keys", first, last, rounds)
	}
}
