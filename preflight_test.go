package floodgate

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cors is a minimal CORS handler of the usual shape (rs/cors,
// gorilla/handlers): it answers a preflight itself, 204 with the allow
// headers and no body, and sets the response headers of an actual
// cross-origin request before calling next, so that whatever next
// answers — a 429 included — carries them.
func cors(origin string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != origin {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", "Content-Type")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "Retry-After, RateLimit, RateLimit-Policy")
		next.ServeHTTP(w, r)
	})
}

const pageOrigin = "https://app.example"

func preflight(path string) *http.Request {
	r := newRequest(http.MethodOptions, path, "198.51.100.4:5000")
	r.Header.Set("Origin", pageOrigin)
	r.Header.Set("Access-Control-Request-Method", "POST")
	r.Header.Set("Access-Control-Request-Headers", "content-type")
	return r
}

func crossOriginPost(path string) *http.Request {
	r := newRequest(http.MethodPost, path, "198.51.100.4:5000")
	r.Header.Set("Origin", pageOrigin)
	r.Header.Set("Content-Type", "application/json")
	return r
}

// remaining is the quota left for key, asked without consuming.
func remaining(t *testing.T, l Limiter, key string) int {
	t.Helper()
	d, err := l.AllowN(context.Background(), key, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// A browser's preflight never consumes quota, wherever the CORS handler
// sits: the quota left is the same before and after each. With the CORS
// handler outside the limit (the placement the README gives) it never
// reaches the limit, and the 429 carries Access-Control-Allow-Origin, so
// the page can read it and its Retry-After; with the limit outside, a
// preflight is decided as a request and given back once the CORS handler
// has answered it, so on a spent quota it is refused with the 429 the
// real request would get — which that placement hides from the page
// either way. Issue 20 §4: before, with the limit outside, each preflight
// spent a unit (1 of 3 POSTs got through on a quota of 3).
func TestPreflightNeverConsumesQuota(t *testing.T) {
	for _, tt := range []struct {
		placement string
		want      string
	}{
		{"limit outside CORS", "204+200 204+200 204+200 429+429 429+429"},
		{"CORS outside the limit", "204+200 204+200 204+200 204+429 204+429"},
	} {
		t.Run(tt.placement, func(t *testing.T) {
			handler := &countingHandler{}
			lim := mustTokenBucket(t, PerHour(3), WithClock(routeClock()))
			limit := mustMiddleware(t, lim)
			var h http.Handler
			if tt.placement == "limit outside CORS" {
				h = limit(cors(pageOrigin, handler))
			} else {
				h = cors(pageOrigin, limit(handler))
			}
			var got []string
			for range 5 { // the page posts 5 times, each after a preflight
				before := remaining(t, lim, "198.51.100.4")
				pre := serve(h, preflight("/api/order"))
				if after := remaining(t, lim, "198.51.100.4"); after != before {
					t.Errorf("a preflight answered %d took the quota from %d to %d", pre.Code, before, after)
				}
				post := serve(h, crossOriginPost("/api/order"))
				got = append(got, pre.Result().Status[:3]+"+"+post.Result().Status[:3])
				if pre.Code == http.StatusNoContent && (pre.Header().Get("Access-Control-Allow-Methods") == "" || pre.Body.Len() != 0) {
					t.Errorf("preflight answered %d %v %q, want the CORS handler's 204", pre.Code, pre.Header(), pre.Body.String())
				}
				if post.Code == http.StatusTooManyRequests && tt.placement == "CORS outside the limit" &&
					(post.Header().Get("Access-Control-Allow-Origin") != pageOrigin || post.Header().Get("Retry-After") == "") {
					t.Errorf("429 without CORS headers: %v", post.Header())
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("preflight+POST statuses %v, want %s", got, tt.want)
			}
			if handler.count() != 3 {
				t.Errorf("the handler ran %d times, want 3", handler.count())
			}
		})
	}
}

// Honest preflights in flight together hold their reservations only
// while the CORS handler answers them: 200 at once, from one client, on a
// quota of 3, leave the quota whole, and each is answered 204 or 429
// (never run as a request).
func TestConcurrentPreflightsLeaveQuotaWhole(t *testing.T) {
	handler := &countingHandler{}
	lim := mustTokenBucket(t, PerHour(3), WithClock(routeClock()))
	h := mustMiddleware(t, lim)(cors(pageOrigin, handler))
	var wg sync.WaitGroup
	var ok, denied atomic.Int32
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch serve(h, preflight("/api/order")).Code {
			case http.StatusNoContent:
				ok.Add(1)
			case http.StatusTooManyRequests:
				denied.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load()+denied.Load() != 200 || ok.Load() < 3 {
		t.Errorf("%d preflights answered 204 and %d 429, want 200 in all and at least 3 answered", ok.Load(), denied.Load())
	}
	if got := remaining(t, lim, "198.51.100.4"); got != 3 || handler.count() != 0 {
		t.Errorf("after 200 concurrent preflights: %d of 3 left, handler ran %d times", got, handler.count())
	}
}

// Dressing requests as preflights is no way around the limit. A handler
// that answers OPTIONS as it answers GET (a username probe with a body),
// or as a login answers a wrong password (a bodiless 401: red-team
// finding 6b, 50 of 50 reached it on a quota of 3), or that does its work
// and answers 204 No Content, is reached exactly the quota's times: each
// dressed request reserves its cost, and keeps it, since its answer is no
// preflight's (a 2xx allowing an origin, without a body). So are
// requests only partly dressed, and those a browser never sends as a
// preflight (a body, credentials).
func TestDressedPreflightsCounted(t *testing.T) {
	probe := func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"available":false}`))
	}
	login := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) }
	sendCode := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }
	dress := func(f func(r *http.Request)) func() *http.Request {
		return func() *http.Request {
			r := preflight("/auth/available/user_id?userId=victim")
			if f != nil {
				f(r)
			}
			return r
		}
	}
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
		req     func() *http.Request
	}{
		{"probe answering with a body", probe, dress(nil)},
		{"login answering a bare 401", login, dress(nil)},
		{"action answering 204", sendCode, dress(nil)},
		{"action answering 204, null origin", sendCode, dress(func(r *http.Request) { r.Header.Set("Origin", "null") })},
		{"with a body", sendCode, dress(func(r *http.Request) { r.Body, r.ContentLength = ioNopCloser("x"), 1 })},
		{"with a cookie", sendCode, dress(func(r *http.Request) { r.Header.Set("Cookie", "session=1") })},
		{"with a bad origin", sendCode, dress(func(r *http.Request) { r.Header.Set("Origin", "https://app.example/") })},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			h := mustMiddleware(t, mustTokenBucket(t, PerHour(3), WithClock(routeClock())))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				tt.handler(w, r)
			}))
			var codes []int
			for range 50 {
				codes = append(codes, serve(h, tt.req()).Code)
			}
			if runs != 3 || codes[3] != http.StatusTooManyRequests || codes[49] != http.StatusTooManyRequests {
				t.Errorf("the handler ran %d times for 50 dressed requests on a quota of 3, want 3 (statuses %v)", runs, codes[:5])
			}
		})
	}
}

// Many dressed requests at once (red-team finding 6a: 100 concurrent ones
// reached a probe 100 times on a quota of 2, since the exemption ended
// only once the first had been answered) reach it the quota's times,
// over a real server.
func TestDressedPreflightsConcurrent(t *testing.T) {
	var ran atomic.Int32
	release := make(chan struct{})
	probe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		<-release // the user lookup, held until every request is in
		_, _ = w.Write([]byte(`{"available":false}`))
	})
	srv := httptest.NewServer(mustMiddleware(t, mustTokenBucket(t, PerHour(2), WithClock(routeClock())))(probe))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer client.CloseIdleConnections()
	const n = 100
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/auth/available/user_id?userId=alice", nil)
			req.Header.Set("Origin", "https://evil.example")
			req.Header.Set("Access-Control-Request-Method", "GET")
			resp, err := client.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	denied := 0
	timeout := time.After(10 * time.Second) // bounds a failure: more than 2 held in the probe
wait:
	for range n - 2 { // all but the two the quota holds are answered first
		select {
		case c := <-codes:
			if c == http.StatusTooManyRequests {
				denied++
			}
		case <-timeout:
			break wait
		}
	}
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request the quota held answered %d", c)
		}
	}
	if ran.Load() != 2 || denied != n-2 {
		t.Errorf("%d dressed requests at once: the probe ran %d times and %d were denied, want 2 and %d", n, ran.Load(), denied, n-2)
	}
}

// The shapes a browser sends as a preflight, and near misses.
func TestIsPreflight(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(r *http.Request)
		want bool
	}{
		{"browser", nil, true},
		{"null origin", func(r *http.Request) { r.Header.Set("Origin", "null") }, true},
		{"port", func(r *http.Request) { r.Header.Set("Origin", "http://localhost:8080") }, true},
		{"IPv6", func(r *http.Request) { r.Header.Set("Origin", "http://[::1]:8080") }, true},
		{"Content-Length 0", func(r *http.Request) { r.Header.Set("Content-Length", "0") }, true},
		{"GET", func(r *http.Request) { r.Method = http.MethodGet }, false},
		{"no origin", func(r *http.Request) { r.Header.Del("Origin") }, false},
		{"two origins", func(r *http.Request) { r.Header.Add("Origin", pageOrigin) }, false},
		{"origin with a path", func(r *http.Request) { r.Header.Set("Origin", "https://app.example/") }, false},
		{"origin with a user", func(r *http.Request) { r.Header.Set("Origin", "https://u@app.example") }, false},
		{"origin upper case", func(r *http.Request) { r.Header.Set("Origin", "https://App.example") }, false},
		{"origin without scheme", func(r *http.Request) { r.Header.Set("Origin", "app.example") }, false},
		{"origin empty host", func(r *http.Request) { r.Header.Set("Origin", "https://") }, false},
		{"origin port only", func(r *http.Request) { r.Header.Set("Origin", "https://:443") }, false},
		{"no method", func(r *http.Request) { r.Header.Del("Access-Control-Request-Method") }, false},
		{"empty method", func(r *http.Request) { r.Header.Set("Access-Control-Request-Method", "") }, false},
		{"method not a token", func(r *http.Request) { r.Header.Set("Access-Control-Request-Method", "PO ST") }, false},
		{"two methods", func(r *http.Request) { r.Header.Add("Access-Control-Request-Method", "GET") }, false},
		{"body", func(r *http.Request) { r.Body, r.ContentLength = ioNopCloser("x"), 1 }, false},
		{"chunked body", func(r *http.Request) {
			r.Body, r.ContentLength, r.TransferEncoding = ioNopCloser("x"), -1, []string{"chunked"}
		}, false},
		{"authorization", func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, false},
		{"cookie", func(r *http.Request) { r.Header.Set("Cookie", "a=b") }, false},
	} {
		r := preflight("/api/order")
		if tt.edit != nil {
			tt.edit(r)
		}
		if got := isPreflight(r); got != tt.want {
			t.Errorf("%s: isPreflight %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A preflight is given back only when its answer is one a browser takes
// for a successful preflight: a 2xx allowing an origin, with no body.
// A CORS handler that refuses the origin (no Access-Control-Allow-Origin,
// as rs/cors answers it, or a 403) leaves it counted: the page could not
// use the answer anyway.
func TestPreflightAnswers(t *testing.T) {
	allow := func(w http.ResponseWriter) { w.Header().Set("Access-Control-Allow-Origin", pageOrigin) }
	for _, tt := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		back   bool
	}{
		{"204 allowing", func(w http.ResponseWriter) { allow(w); w.WriteHeader(http.StatusNoContent) }, true},
		{"200 allowing, nothing written", func(w http.ResponseWriter) { allow(w) }, true},
		{"200 allowing, flushed", func(w http.ResponseWriter) { allow(w); w.(http.Flusher).Flush() }, true},
		{"204, origin refused", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, false},
		{"403", func(w http.ResponseWriter) { allow(w); w.WriteHeader(http.StatusForbidden) }, false},
		{"allowed after the header went out", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent); allow(w) }, false},
		{"a body", func(w http.ResponseWriter) { allow(w); _, _ = w.Write([]byte("{}")) }, false},
		{"an empty write", func(w http.ResponseWriter) { allow(w); _, _ = w.Write(nil) }, true},
		{"a body copied", func(w http.ResponseWriter) { allow(w); _, _ = io.Copy(w, strings.NewReader("{}")) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := mustTokenBucket(t, PerHour(3), WithClock(routeClock()))
			h := mustMiddleware(t, lim)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tt.answer(w) }))
			serve(h, preflight("/api/order"))
			want := 2
			if tt.back {
				want = 3
			}
			if got := remaining(t, lim, "198.51.100.4"); got != want {
				t.Errorf("%d of 3 left after the preflight, want %d", got, want)
			}
		})
	}
}

// Under WithCountStatus too, a preflight answered as one is given back,
// and a dressed one answered with a counted status stays counted.
func TestPreflightUnderCountStatus(t *testing.T) {
	lim := mustTokenBucket(t, PerHour(3), WithClock(routeClock()))
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	limit := mustMiddleware(t, lim, WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	serve(limit(cors(pageOrigin, login)), preflight("/login"))
	if got := remaining(t, lim, "198.51.100.4"); got != 3 {
		t.Errorf("%d of 3 left after an honest preflight", got)
	}
	serve(limit(login), preflight("/login"))
	if got := remaining(t, lim, "198.51.100.4"); got != 2 {
		t.Errorf("%d of 3 left after a dressed one answered 401, want 2", got)
	}
}

// With the admission kinds: a preflight holds its in-flight slot only
// while the CORS handler answers it, and under WithCostAfter one answered
// as a preflight costs nothing, while a dressed one pays its real cost.
func TestPreflightWithAdmissionKinds(t *testing.T) {
	slots, err := NewInFlight(2)
	if err != nil {
		t.Fatal(err)
	}
	serve(mustMiddleware(t, slots)(cors(pageOrigin, &countingHandler{})), preflight("/api/order"))
	if d, _ := slots.AllowN(context.Background(), "198.51.100.4", 0); d.Remaining != 2 {
		t.Errorf("%d of 2 slots free after a preflight", d.Remaining)
	}
	perByte, err := CostBytes(1)
	if err != nil {
		t.Fatal(err)
	}
	lim := mustTokenBucket(t, PerHour(10), WithClock(routeClock()))
	limit := mustMiddleware(t, lim, WithCostAfter(perByte))
	serve(limit(cors(pageOrigin, &countingHandler{})), preflight("/api/order"))
	if got := remaining(t, lim, "198.51.100.4"); got != 10 {
		t.Errorf("%d of 10 left after an honest preflight under WithCostAfter", got)
	}
	probe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("12345")) })
	serve(limit(probe), preflight("/api/order"))
	if got := remaining(t, lim, "198.51.100.4"); got != 5 {
		t.Errorf("%d of 10 left after a dressed preflight answered with 5 bytes, want 5", got)
	}
}

// A limiter that cannot give units back counts preflights: the safe side.
func TestPreflightOnLimiterThatCannotRefund(t *testing.T) {
	lim := &fakeLimiter{d: Decision{Allowed: true, Limit: 10, Remaining: 9}}
	var events []DecisionEvent
	h := mustMiddleware(t, lim, WithDecisionHook(func(ev DecisionEvent) { events = append(events, ev) }))(cors(pageOrigin, &countingHandler{}))
	if w := serve(h, preflight("/api/order")); w.Code != http.StatusNoContent {
		t.Fatalf("preflight answered %d", w.Code)
	}
	if calls := lim.recorded(); len(calls) != 1 || calls[0].n != 1 || len(events) != 1 || events[0].AfterHandler {
		t.Errorf("calls %v, events %+v: want one charge of 1 and no refund", calls, events)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// WithLimitPreflights counts preflights as requests; an OPTIONS request
// that is no preflight (no Access-Control-Request-Method) always is.
func TestPreflightsLimitedOnRequest(t *testing.T) {
	handler := &countingHandler{}
	h := mustMiddleware(t, mustTokenBucket(t, PerHour(2), WithClock(routeClock())), WithLimitPreflights())(cors(pageOrigin, handler))
	var codes []int
	for range 3 {
		codes = append(codes, serve(h, preflight("/api/order")).Code)
	}
	if codes[0] != 204 || codes[1] != 204 || codes[2] != 429 {
		t.Errorf("preflights under WithLimitPreflights: %v, want 204 204 429", codes)
	}
	plain := mustMiddleware(t, mustTokenBucket(t, PerHour(1), WithClock(routeClock())))(handler)
	codes = codes[:0]
	for range 2 {
		r := newRequest(http.MethodOptions, "/api/order", "198.51.100.4:5000")
		r.Header.Set("Origin", pageOrigin) // no Access-Control-Request-Method: not a preflight
		codes = append(codes, serve(plain, r).Code)
	}
	if codes[1] != http.StatusTooManyRequests {
		t.Errorf("OPTIONS without Access-Control-Request-Method: %v, want the second limited", codes)
	}
}
