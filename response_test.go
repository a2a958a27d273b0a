package floodgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		wait time.Duration
		want int64
	}{
		{0, 1},
		{-time.Second, 1},
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{59*time.Second + 1, 60},
		{10 * time.Minute, 600},
	}
	for _, tt := range tests {
		if got := RetryAfterSeconds(tt.wait); got != tt.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tt.wait, got, tt.want)
		}
	}
}

// sfItem is one member of a Structured Field List whose bare items are
// Strings and whose parameters are Integers: the shape of RateLimit and
// RateLimit-Policy.
type sfItem struct {
	name   string
	params map[string]int64
	order  []string
}

// parseSFList parses s strictly by RFC 9651 section 4.2, accepting only
// String items with Integer parameters, so anything the middleware emits
// that a conforming parser would reject (a bare token, an unescaped quote,
// a float, a duplicate parameter, stray whitespace) fails the test.
func parseSFList(s string) ([]sfItem, error) {
	p := sfParser{s: strings.Trim(s, " ")}
	var items []sfItem
	for {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.done() {
			return items, nil
		}
		if !p.eat(',') {
			return nil, fmt.Errorf("at %d: want ',' after a member", p.i)
		}
		p.ows()
		if p.done() {
			return nil, errors.New("trailing comma")
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) eat(c byte) bool {
	if !p.done() && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *sfParser) ows() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	name, err := p.str()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{name: name, params: map[string]int64{}}
	for p.eat(';') {
		for p.eat(' ') {
		}
		key, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		if !p.eat('=') {
			return sfItem{}, fmt.Errorf("parameter %q: want an Integer value", key)
		}
		v, err := p.integer()
		if err != nil {
			return sfItem{}, fmt.Errorf("parameter %q: %w", key, err)
		}
		if _, dup := it.params[key]; dup {
			return sfItem{}, fmt.Errorf("parameter %q repeated", key)
		}
		it.params[key] = v
		it.order = append(it.order, key)
	}
	return it, nil
}

func (p *sfParser) str() (string, error) {
	if !p.eat('"') {
		return "", fmt.Errorf("at %d: want a String", p.i)
	}
	var b strings.Builder
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", errors.New("bad escape in String")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#x not allowed in a String", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated String")
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.done() || (p.s[p.i] < 'a' || p.s[p.i] > 'z') && p.s[p.i] != '*' {
		return "", fmt.Errorf("at %d: want a key", p.i)
	}
	for !p.done() {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0 {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) integer() (int64, error) {
	start := p.i
	p.eat('-')
	digits := p.i
	for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if n := p.i - digits; n == 0 || n > 15 {
		return 0, fmt.Errorf("at %d: want 1 to 15 digits", start)
	}
	if !p.done() && p.s[p.i] == '.' {
		return 0, errors.New("a Decimal, not an Integer")
	}
	return strconv.ParseInt(p.s[start:p.i], 10, 64)
}

func TestSFParserRejects(t *testing.T) {
	for _, s := range []string{
		`default;q=10`,           // token, not a String
		`"a"b";q=1`,              // unescaped quote
		`"a";q=1.5`,              // decimal
		`"a";q`,                  // boolean parameter
		`"a";Q=1`,                // upper-case key
		`"a";q=1;q=2`,            // repeated
		`"a";q=1,`,               // trailing comma
		`"a";q=1234567890123456`, // 16 digits
		"\"a\u00e9\";q=1",        // non-ASCII
	} {
		if _, err := parseSFList(s); err == nil {
			t.Errorf("parseSFList(%q) accepted it", s)
		}
	}
	items, err := parseSFList(`"a\"b\\c";q=10;w=600, "x";r=0`)
	if err != nil || len(items) != 2 || items[0].name != `a"b\c` || items[0].params["w"] != 600 || items[1].params["r"] != 0 {
		t.Fatalf("parse of a valid list: %+v, %v", items, err)
	}
}

// The fields the middleware emits parse back as Structured Fields with
// the values of the decision, including a policy name that needs escaping.
func TestQuotaHeadersParseAsStructuredFields(t *testing.T) {
	clk := newFakeClock()
	tb := mustTokenBucket(t, Rate{Limit: 10, Period: 10 * time.Minute}, WithClock(clk.Now))
	every := make([]byte, 0, 0x7f-0x20)
	for c := byte(0x20); c < 0x7f; c++ {
		every = append(every, c)
	}
	for _, name := range []string{"default", `odd "name" \ here`, string(every)} {
		h := mustMiddleware(t, tb, WithPolicyName(name), WithKeyFunc(func(*http.Request) (string, error) { return name, nil }))(&countingHandler{})
		for i := 0; i < 11; i++ {
			w := serve(h, newRequest("GET", "/", "192.0.2.1:1"))
			pol, err := parseSFList(w.Header().Get("RateLimit-Policy"))
			if err != nil {
				t.Fatalf("RateLimit-Policy %q: %v", w.Header().Get("RateLimit-Policy"), err)
			}
			rl, err := parseSFList(w.Header().Get("RateLimit"))
			if err != nil {
				t.Fatalf("RateLimit %q: %v", w.Header().Get("RateLimit"), err)
			}
			if len(pol) != 1 || pol[0].name != name || pol[0].params["q"] != 10 || pol[0].params["w"] != 600 || strings.Join(pol[0].order, ",") != "q,w" {
				t.Fatalf("request %d: RateLimit-Policy %+v", i, pol)
			}
			wantR, wantT := int64(9-i), int64(60*(i+1))
			if i == 10 { // denied: t is the retry delay
				wantR, wantT = 0, 60
			}
			if len(rl) != 1 || rl[0].name != name || rl[0].params["r"] != wantR || rl[0].params["t"] != wantT {
				t.Fatalf("request %d: RateLimit %+v, want r=%d t=%d", i, rl, wantR, wantT)
			}
		}
	}
}

func TestHeaderStyles(t *testing.T) {
	clk := newFakeClock()
	allowed := Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 41500 * time.Millisecond}
	reset := strconv.FormatInt(clk.Now().Add(42*time.Second).Unix(), 10)
	tests := []struct {
		style HeaderStyle
		want  map[string]string
	}{
		{HeadersIETF, map[string]string{"RateLimit-Policy": `"default";q=10`, "RateLimit": `"default";r=3;t=42`}},
		{HeadersLegacy, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": reset}},
		{HeadersBoth, map[string]string{"RateLimit-Policy": `"default";q=10`, "RateLimit": `"default";r=3;t=42`,
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "3", "X-RateLimit-Reset": reset}},
		{HeadersNone, map[string]string{}},
	}
	for _, tt := range tests {
		// A limiter that does not report its Rate: no w parameter.
		lim := &fakeLimiter{d: allowed}
		w := serve(mustMiddleware(t, lim, WithHeaders(tt.style), WithWallClock(clk.Now))(&countingHandler{}), newRequest("GET", "/", "192.0.2.1:1"))
		got := map[string]string{}
		for k := range w.Header() {
			if k != "Content-Type" {
				got[http.CanonicalHeaderKey(k)] = w.Header().Get(k)
			}
		}
		want := map[string]string{}
		for k, v := range tt.want {
			want[http.CanonicalHeaderKey(k)] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("style %d: headers %v, want %v", tt.style, got, want)
		}
	}
}

// The keys assigned directly to the header map must be the canonical
// forms, or Header.Get would not find them.
func TestHeaderKeysAreCanonical(t *testing.T) {
	for _, k := range []string{headerRateLimitPolicy, headerRateLimit, headerLegacyLimit, headerLegacyRemaining,
		headerLegacyReset, headerRetryAfter, headerContentType} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical (%q)", k, c)
		}
	}
}

func TestProblemDetailsBody(t *testing.T) {
	tests := []struct {
		d          Decision
		detail     string
		retryAfter any
	}{
		{Decision{Limit: 10, RetryAfter: 41100 * time.Millisecond}, "Rate limit exceeded; retry after 42 seconds.", float64(42)},
		{Decision{Limit: 10, RetryAfter: time.Millisecond}, "Rate limit exceeded; retry after 1 seconds.", float64(1)},
		{Decision{Limit: 10}, "The request costs more than the rate limit allows and cannot succeed.", nil},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		ProblemDetails(w, nil, tt.d)
		if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
		}
		var p map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("body %q is not JSON: %v", w.Body, err)
		}
		if p["type"] != "about:blank" || p["title"] != "Too Many Requests" || p["status"] != float64(429) || p["detail"] != tt.detail || p["retryAfter"] != tt.retryAfter {
			t.Errorf("body %v", p)
		}
	}
}

const envelope429 = `{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`

func TestStaticJSONIsByteExact(t *testing.T) {
	body := []byte(envelope429)
	deny, err := StaticJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	copy(body, "XXXXXXXX") // the handler holds its own copy
	tb := mustTokenBucket(t, PerHour(1))
	h := mustMiddleware(t, tb, WithDeniedHandler(deny))(&countingHandler{})
	serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	w := serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	if w.Code != 429 || w.Body.String() != envelope429 {
		t.Fatalf("status %d, body %q", w.Code, w.Body)
	}
	if w.Header().Get("Content-Type") != "application/json" || w.Header().Get("Retry-After") != "3600" {
		t.Fatalf("headers %v", w.Header())
	}
	if _, err := StaticJSON([]byte(`{"resultCode":`)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("invalid JSON: %v, want ErrInvalidOption", err)
	}
}

func TestFailClosedBody(t *testing.T) {
	w := httptest.NewRecorder()
	FailClosed(w, nil, errors.New("secret internals"))
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if w.Code != 503 || p["status"] != float64(503) || p["title"] != "Service Unavailable" || strings.Contains(w.Body.String(), "secret") {
		t.Fatalf("status %d, body %s", w.Code, w.Body)
	}
}

// Headers set by the middleware share a backing array; appending to one
// must not overwrite its neighbour.
func TestQuotaHeaderSlicesAreIndependent(t *testing.T) {
	lim := &fakeLimiter{d: Decision{Limit: 5, Remaining: 0, RetryAfter: 3 * time.Second}}
	h := mustMiddleware(t, lim, WithHeaders(HeadersBoth), WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, _ Decision) {
		w.Header().Add("Retry-After", "extra")
		w.Header().Add("Content-Type", "text/plain")
		w.WriteHeader(429)
	}))(&countingHandler{})
	w := serve(h, newRequest("GET", "/", "192.0.2.1:1"))
	if got := w.Header().Values("Retry-After"); len(got) != 2 || got[0] != "3" {
		t.Fatalf("Retry-After %q", got)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"default";q=5` {
		t.Fatalf("RateLimit-Policy %q overwritten by an Add to its neighbour", got)
	}
	if got := problemContentType; len(got) != 1 || got[0] != contentTypeProblem {
		t.Fatalf("shared Content-Type value changed: %q", got)
	}
}

// Two stacked middlewares each add their member to the IETF lists, and
// the result still parses.
func TestStackedMiddlewaresListBothPolicies(t *testing.T) {
	clk := newFakeClock()
	outer := mustTokenBucket(t, PerHour(30), WithClock(clk.Now))
	inner := mustTokenBucket(t, PerHour(1), WithClock(clk.Now))
	h := mustMiddleware(t, outer, WithPolicyName("ip"))(
		mustMiddleware(t, inner, WithPolicyName("account"))(&countingHandler{}))
	serve(h, newRequest("POST", "/", "192.0.2.1:1"))
	w := serve(h, newRequest("POST", "/", "192.0.2.1:1"))
	if w.Code != 429 {
		t.Fatalf("status %d, want the inner limit's 429", w.Code)
	}
	pol, err := parseSFList(strings.Join(w.Header().Values("RateLimit-Policy"), ", "))
	if err != nil || len(pol) != 2 || pol[0].name != "ip" || pol[1].name != "account" {
		t.Fatalf("RateLimit-Policy %q: %+v %v", w.Header().Values("RateLimit-Policy"), pol, err)
	}
	rl, err := parseSFList(strings.Join(w.Header().Values("RateLimit"), ", "))
	if err != nil || len(rl) != 2 || rl[0].params["r"] != 28 || rl[1].params["r"] != 0 || rl[1].params["t"] != 3600 {
		t.Fatalf("RateLimit %q: %+v %v", w.Header().Values("RateLimit"), rl, err)
	}
}

// benchWriter is a ResponseWriter that keeps one header map across
// requests, so the benchmark measures the middleware, not the recorder.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }

func (w *benchWriter) reset() {
	clear(w.h)
	w.status = 0
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

// BenchmarkMiddlewareAllowed is the allowed path on a populated store:
// 100k client IPs, a real TokenBucket with room for all of them, IETF
// headers, in parallel. The quota is steady: refilled faster than the
// benchmark takes it, every request sees the same values — the case
// where the tables of formatted values always hit.
func BenchmarkMiddlewareAllowed(b *testing.B) {
	benchMiddlewareAllowed(b, Rate{Limit: 1 << 24, Period: time.Second}, false)
}

// BenchmarkMiddlewareAllowedDraining is BenchmarkMiddlewareAllowed under
// a quota the clients spend, as a real per-client quota is spent (issue
// 31): 2^24 per 30 days, and each client has spent a different amount,
// so that consecutive requests see different remaining counts and
// resets, and no table of formatted values can serve them.
func BenchmarkMiddlewareAllowedDraining(b *testing.B) {
	benchMiddlewareAllowed(b, Rate{Limit: 1 << 24, Period: 30 * 24 * time.Hour}, true)
}

func benchMiddlewareAllowed(b *testing.B, r Rate, spendApart bool) {
	const clients = 100_000
	tb, err := NewTokenBucket(r)
	if err != nil {
		b.Fatal(err)
	}
	h := Middleware(tb)(okHandler)
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		reqs[i], _ = http.NewRequest(http.MethodGet, "http://example.com/", nil)
		ip := "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
		reqs[i].RemoteAddr = ip + ":1234"
		w := &benchWriter{h: http.Header{}}
		h.ServeHTTP(w, reqs[i]) // populate the store
		if spendApart {
			if _, err := tb.AllowN(context.Background(), ip, i); err != nil {
				b.Fatal(err)
			}
		}
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &benchWriter{h: make(http.Header, 4)}
		i := int(next.Add(7919)) // spread the goroutines over the key set
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, reqs[i%clients])
			if w.status != 0 {
				b.Fatalf("status %d, want the handler's default", w.status)
			}
			i++
		}
	})
}

// BenchmarkMiddlewareDenied is the denied path: one hot key, always out of
// quota, default problem+json body.
func BenchmarkMiddlewareDenied(b *testing.B) {
	tb, err := NewTokenBucket(Rate{Limit: 1, Period: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	h := Middleware(tb)(okHandler)
	r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
	r.RemoteAddr = "192.0.2.7:1234"
	h.ServeHTTP(&benchWriter{h: http.Header{}}, r) // spend the only token
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &benchWriter{h: make(http.Header, 4)}
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, r)
			if w.status != http.StatusTooManyRequests {
				b.Fatalf("status %d, want 429", w.status)
			}
		}
	})
}

// BenchmarkMiddlewareBaseline is the work the middleware cannot avoid on
// the allowed path of BenchmarkMiddlewareAllowed: the key function and
// the limiter's decision, without headers. The difference between the two
// is the cost of the HTTP face.
func BenchmarkMiddlewareBaseline(b *testing.B) {
	const clients = 100_000
	tb, err := NewTokenBucket(Rate{Limit: 1 << 24, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	key, _ := KeyByIP()
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		reqs[i], _ = http.NewRequest(http.MethodGet, "http://example.com/", nil)
		reqs[i].RemoteAddr = "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
		k, _ := key(reqs[i])
		_, _ = tb.AllowN(reqs[i].Context(), k, 1)
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			r := reqs[i%clients]
			k, err := key(r)
			if err != nil {
				b.Fatal(err)
			}
			if d, _ := tb.AllowN(r.Context(), k, 1); !d.Allowed {
				b.Fatal("denied")
			}
			i++
		}
	})
}

// BenchmarkQuotaHeaders isolates the HTTP face of an allowed request: the
// IETF fields for one decision, into a reused header map, no limiter.
func BenchmarkQuotaHeaders(b *testing.B) {
	p, err := newPolicy(DefaultPolicyName, mustBenchBucket(b), true)
	if err != nil {
		b.Fatal(err)
	}
	d := Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 42 * time.Second}
	h := make(http.Header, 4)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		clear(h)
		var q Quota
		p.quota(&quotaRequest{style: HeadersIETF, d: &d, now: time.Now}, &q)
		writeQuota(h, &q)
	}
	if h.Get("RateLimit") != `"default";r=3;t=42` {
		b.Fatalf("RateLimit %q", h.Get("RateLimit"))
	}
}

// BenchmarkDeniedResponse isolates the HTTP face of a denial: headers,
// Retry-After and the problem+json body, no limiter.
func BenchmarkDeniedResponse(b *testing.B) {
	p, err := newPolicy(DefaultPolicyName, mustBenchBucket(b), true)
	if err != nil {
		b.Fatal(err)
	}
	d := Decision{Limit: 10, RetryAfter: 42 * time.Second, ResetAfter: 10 * time.Minute}
	w := &benchWriter{h: make(http.Header, 4)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		w.reset()
		var q Quota
		p.quota(&quotaRequest{style: HeadersIETF, d: &d, retry: true, now: time.Now}, &q)
		writeQuota(w.h, &q)
		ProblemDetails(w, nil, d)
	}
	if w.status != http.StatusTooManyRequests {
		b.Fatalf("status %d", w.status)
	}
}

func mustBenchBucket(b *testing.B) *TokenBucket {
	tb, err := NewTokenBucket(Rate{Limit: 10, Period: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return tb
}

// Data flows one way (issue 15): the policy computes its header values,
// response.go only writes them, so it must not reach back into the
// policy type.
func TestResponseDoesNotCallBackIntoPolicy(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "response.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && (id.Name == "policy" || id.Name == "PolicySelector") {
			t.Errorf("response.go refers to %s", id.Name)
		}
		return true
	})
}

// TestQuotaSetHeaders: an adapter writing an Outcome's Quota into an
// http.Header gets exactly what the middleware sends.
func TestQuotaSetHeaders(t *testing.T) {
	lim, err := NewTokenBucket(Rate{Limit: 2, Period: time.Minute}, WithClock(func() time.Time { return time.Unix(1e9, 0) }))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := NewSelectorFor(PolicyFor[string]{Name: "p", Limiter: lim, Key: func(k string) (string, error) { return k, nil }})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := NewGate(sel, WithHeaders(HeadersBoth), WithWallClock(func() time.Time { return time.Unix(1e9, 0) }))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []http.Header{
		{"Ratelimit-Policy": {`"p";q=2;w=60`}, "Ratelimit": {`"p";r=1;t=30`}, "X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"1"}, "X-Ratelimit-Reset": {"1000000030"}},
		{"Ratelimit-Policy": {`"p";q=2;w=60`}, "Ratelimit": {`"p";r=0;t=60`}, "X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1000000060"}},
		{"Ratelimit-Policy": {`"p";q=2;w=60`}, "Ratelimit": {`"p";r=0;t=30`}, "X-Ratelimit-Limit": {"2"}, "X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1000000060"}, "Retry-After": {"30"}},
	} {
		out := gate.Admit(context.Background(), sel.Call("k"))
		h := http.Header{}
		out.Quota.SetHeaders(h)
		if fmt.Sprint(h) != fmt.Sprint(want) {
			t.Errorf("call %d: %v, want %v", i, h, want)
		}
	}
}

// The quota values are the core's, for every transport (issue 20 §5):
// quota.go formats them and knows nothing of HTTP, which only
// response.go writes.
func TestQuotaValuesKnowNoTransport(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "quota.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if strings.Contains(imp.Path.Value, "net/http") {
			t.Errorf("quota.go imports %s", imp.Path.Value)
		}
	}
}
