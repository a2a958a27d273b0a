package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// End-to-end tests of the example server: the real handler, limiters and
// middleware, on a fake clock, with requests from chosen peer addresses.

type testServer struct {
	t     *testing.T
	h     http.Handler
	clock *floodgatetest.Clock
	logs  *bytes.Buffer
}

func newTestServer(t *testing.T, trusted ...string) *testServer {
	t.Helper()
	return buildTestServer(t, trusted, nil)
}

// buildTestServer builds the server on a fake clock, trusting the given
// proxies; botCheck, if not nil, makes its bot check from the same
// proxies and logger.
func buildTestServer(t *testing.T, trusted []string, botCheck func([]netip.Prefix, *slog.Logger) func(http.Handler) http.Handler) *testServer {
	t.Helper()
	var prefixes []netip.Prefix
	for _, s := range trusted {
		prefixes = append(prefixes, netip.MustParsePrefix(s))
	}
	logs := &bytes.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	cfg := config{TrustedProxies: prefixes, Logger: logger}
	if botCheck != nil {
		cfg.BotCheck = botCheck(prefixes, logger)
	}
	clk := floodgatetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg.Clock = clk.Now
	h, err := newServer(cfg)
	if err != nil {
		t.Fatalf("newServer: %v", err)
	}
	return &testServer{t: t, h: h, clock: clk, logs: logs}
}

func (s *testServer) do(method, target, peer, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = peer
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, r)
	return w
}

func (s *testServer) probe(peer string, headers ...string) *httptest.ResponseRecorder {
	return s.do("GET", "/auth/available/user_id?userId=newuser", peer, "", headers...)
}

const wantEnvelope = `{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`

func TestUsernameProbe(t *testing.T) {
	s := newTestServer(t)
	const peer = "198.51.100.20:40000"
	for i := 0; i < 10; i++ {
		id := "newuser" + strconv.Itoa(i)
		if i == 3 {
			id = "alice" // taken
		}
		w := s.do("GET", "/auth/available/user_id?userId="+id, peer, "")
		if w.Code != 200 {
			t.Fatalf("probe %d: status %d", i, w.Code)
		}
		var env struct {
			ResultCode string `json:"resultCode"`
			Data       *bool  `json:"data"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Data == nil {
			t.Fatalf("probe %d: body %q (%v)", i, w.Body, err)
		}
		if *env.Data != (i != 3) {
			t.Errorf("probe %d (%s): data %v", i, id, *env.Data)
		}
		if want := `"user_id_probe";r=` + strconv.Itoa(9-i) + `;t=` + strconv.Itoa(60*(i+1)); w.Header().Get("RateLimit") != want {
			t.Errorf("probe %d: RateLimit %q, want %q", i, w.Header().Get("RateLimit"), want)
		}
	}
	w := s.probe(peer)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("11th probe: status %d, want 429", w.Code)
	}
	if w.Body.String() != wantEnvelope {
		t.Fatalf("429 body %q, want the BPLTE429 envelope byte for byte", w.Body)
	}
	if !json.Valid(w.Body.Bytes()) || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("429 body not JSON or wrong type %q", w.Header().Get("Content-Type"))
	}
	if got := w.Header().Get("Retry-After"); got != "60" {
		t.Fatalf("Retry-After %q, want 60 (one token a minute)", got)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"user_id_probe";q=10;w=600` {
		t.Fatalf("RateLimit-Policy %q", got)
	}

	// Another client is not affected; other routes and methods are not
	// limited by the probe's quota.
	if w := s.probe("198.51.100.21:40000"); w.Code != 200 {
		t.Fatalf("another client: status %d", w.Code)
	}
	if w := s.do("GET", "/healthz", peer, ""); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("healthz: status %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
	}
	if w := s.do("POST", "/auth/available/user_id", peer, ""); w.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST to the probe: status %d, want the mux's 405", w.Code)
	}

	s.clock.Advance(59 * time.Second)
	if w := s.probe(peer); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("a second early: status %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	s.clock.Advance(time.Second)
	if w := s.probe(peer); w.Code != 200 {
		t.Fatalf("a refill interval later: status %d, want 200", w.Code)
	}
	if w := s.probe(peer); w.Code != 429 {
		t.Fatalf("right after: status %d, want 429 (only one token came back)", w.Code)
	}

	// One WARN line for the flood of denials from this peer.
	var warns int
	for _, l := range bytes.Split(s.logs.Bytes(), []byte("\n")) {
		if bytes.Contains(l, []byte(`"level":"WARN"`)) && bytes.Contains(l, []byte(`"key":"198.51.100.20"`)) {
			warns++
		}
	}
	if warns != 1 {
		t.Fatalf("%d WARN lines for one key within its reset period, want 1:\n%s", warns, s.logs)
	}
}

func (s *testServer) signup(peer, nickname string) *httptest.ResponseRecorder {
	body, _ := json.Marshal(map[string]string{"nickname": nickname})
	return s.do("POST", "/signup", peer, string(body))
}

// policyHeader returns the member of the quota header name (RateLimit or
// RateLimit-Policy) that belongs to policy, "" if none: a sign-up passes
// two limits, each adding its own member.
func policyHeader(w *httptest.ResponseRecorder, name, policy string) string {
	for _, v := range w.Header().Values(name) {
		if strings.HasPrefix(v, strconv.Quote(policy)+";") {
			return v
		}
	}
	return ""
}

func TestSignupByNicknamePattern(t *testing.T) {
	s := newTestServer(t)
	for i := 1; i <= 5; i++ {
		// Different peers: the pattern limit does not depend on the IP.
		peer := "203.0.113." + strconv.Itoa(i) + ":5000"
		w := s.signup(peer, "abc"+strconv.Itoa(i))
		if w.Code != http.StatusCreated {
			t.Fatalf("abc%d: status %d %s", i, w.Code, w.Body)
		}
		var got map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got["nickname"] != "abc"+strconv.Itoa(i) {
			t.Fatalf("abc%d: body %q", i, w.Body)
		}
	}
	w := s.signup("203.0.113.99:5000", "abc6")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("abc6: status %d, Content-Type %q", w.Code, w.Header().Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p["status"] != float64(429) || p["retryAfter"] != float64(60) {
		t.Fatalf("abc6: problem %q (%v)", w.Body, err)
	}
	if w.Header().Get("Retry-After") != "60" || policyHeader(w, "RateLimit-Policy", "nickname") != `"nickname";q=5;w=60` {
		t.Fatalf("abc6: headers %v", w.Header())
	}
	if w := s.signup("203.0.113.99:5000", "ABC999"); w.Code != 429 {
		t.Fatalf("ABC999 shares abc{NUM}: status %d", w.Code)
	}
	if w := s.signup("203.0.113.99:5000", "xyz1"); w.Code != http.StatusCreated {
		t.Fatalf("xyz1: status %d", w.Code)
	}
	s.clock.Advance(time.Minute)
	if w := s.signup("203.0.113.99:5000", "abc7"); w.Code != http.StatusCreated {
		t.Fatalf("abc7 a window later: status %d", w.Code)
	}
}

// Nicknames with no pattern fall back to the client IP's more lenient
// limit; another IP behind its own NAT is not blocked with it.
func TestSignupIPFallback(t *testing.T) {
	s := newTestServer(t)
	const office = "192.0.2.50:6000"
	for i := 0; i < 20; i++ {
		w := s.signup(office, "u"+strconv.Itoa(i)) // a stem of one letter: no pattern
		if w.Code != http.StatusCreated {
			t.Fatalf("signup %d: status %d %s", i, w.Code, w.Body)
		}
		if got := policyHeader(w, "RateLimit-Policy", "signup_ip"); got != `"signup_ip";q=20;w=60` {
			t.Fatalf("signup %d: RateLimit-Policy %q, want the IP policy", i, got)
		}
	}
	if w := s.signup(office, "zz"); w.Code != 429 || w.Header().Get("Retry-After") != "60" {
		t.Fatalf("21st from one IP: status %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if w := s.signup("192.0.2.51:6000", "zz"); w.Code != http.StatusCreated {
		t.Fatalf("another IP: status %d", w.Code)
	}
	// A nickname with a pattern is limited by it, not by the exhausted IP.
	if w := s.signup(office, "pattern1"); w.Code != http.StatusCreated {
		t.Fatalf("patterned nickname from the busy IP: status %d", w.Code)
	}
}

func TestSignupBadBody(t *testing.T) {
	s := newTestServer(t)
	for _, body := range []string{`{"nickname":`, `[1,2]`, `{"nickname":"a","nickname":"b"}`, strings.Repeat(" ", 5<<10) + `{}`} {
		w := s.do("POST", "/signup", "192.0.2.60:1", body)
		if w.Code != http.StatusBadRequest {
			t.Errorf("body %.30q: status %d, want 400", body, w.Code)
		}
	}
}

func TestRewardClaim(t *testing.T) {
	s := newTestServer(t)
	claim := func(peer, account string) int {
		return s.do("POST", "/rewards/claim", peer, `{"accountId":"`+account+`"}`).Code
	}
	got := []int{claim("192.0.2.70:1", "acc-1"), claim("192.0.2.71:1", "acc-1"), claim("192.0.2.70:1", "acc-2")}
	if want := []int{200, 429, 200}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("claims %v, want %v", got, want)
	}
	w := s.do("POST", "/rewards/claim", "192.0.2.70:1", `{"accountId":"acc-1"}`)
	if vals := w.Header().Values("RateLimit-Policy"); len(vals) != 3 || vals[0] != `"reward_ip";q=30;w=3600` ||
		vals[1] != `"reward_net";q=300;w=3600` || vals[2] != `"reward_account";q=1;w=86400` {
		t.Fatalf("RateLimit-Policy %q, want the three limits", vals)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("no Retry-After on a denied claim")
	}
	if code := s.do("POST", "/rewards/claim", "192.0.2.70:1", `{}`).Code; code != 400 {
		t.Fatalf("no account: status %d", code)
	}
	s.clock.Advance(24 * time.Hour)
	if code := claim("192.0.2.71:1", "acc-1"); code != 200 {
		t.Fatalf("a day later: status %d", code)
	}
	// 30 claims per hour from one IP, whatever the accounts.
	for i := 0; i < 29; i++ {
		if code := claim("192.0.2.80:1", "farm-"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("farm claim %d: %d", i, code)
		}
	}
	if code := claim("192.0.2.80:1", "farm-last"); code != 200 {
		t.Fatalf("30th: %d", code)
	}
	if code := claim("192.0.2.80:1", "farm-more"); code != 429 {
		t.Fatalf("31st from one IP: %d, want 429", code)
	}
}

// Forwarding headers from an untrusted peer never change the key: ten
// probes with ten different spoofed addresses exhaust the peer's own quota.
func TestSpoofedHeadersFromUntrustedPeer(t *testing.T) {
	tests := []struct {
		name   string
		header func(i int) []string
	}{
		{"X-Forwarded-For", func(i int) []string { return []string{"X-Forwarded-For", "10.9.9." + strconv.Itoa(i)} }},
		{"X-Real-IP", func(i int) []string { return []string{"X-Real-IP", "10.9.9." + strconv.Itoa(i)} }},
		{"Forwarded", func(i int) []string { return []string{"Forwarded", "for=10.9.9." + strconv.Itoa(i)} }},
		{"all at once", func(i int) []string {
			return []string{"X-Forwarded-For", "10.8.8." + strconv.Itoa(i), "X-Real-IP", "10.7.7." + strconv.Itoa(i),
				"Forwarded", `for="[2001:db8::` + strconv.Itoa(i) + `]"`, "CF-Connecting-IP", "10.6.6." + strconv.Itoa(i)}
		}},
	}
	for _, trusted := range [][]string{nil, {"10.0.0.0/8"}} {
		for _, tt := range tests {
			t.Run(tt.name+"/trusted="+strings.Join(trusted, ","), func(t *testing.T) {
				s := newTestServer(t, trusted...) // a trusted proxy elsewhere changes nothing for this peer
				const peer = "198.51.100.30:1234"
				for i := 0; i < 10; i++ {
					if w := s.probe(peer, tt.header(i)...); w.Code != 200 {
						t.Fatalf("probe %d: status %d", i, w.Code)
					}
				}
				if w := s.probe(peer, tt.header(99)...); w.Code != 429 {
					t.Fatalf("11th probe with yet another spoofed address: status %d, want 429", w.Code)
				}
			})
		}
	}
}

// Behind a trusted proxy the client is the right-most untrusted address;
// whatever the client writes to the left of it does not matter.
func TestForgedChainBehindTrustedProxy(t *testing.T) {
	s := newTestServer(t, "10.0.0.0/8")
	const proxy = "10.0.0.2:8443"
	for i := 0; i < 10; i++ {
		forged := "6.6.6." + strconv.Itoa(i) + ", 7.7.7." + strconv.Itoa(i)
		if w := s.probe(proxy, "X-Forwarded-For", forged+", 198.51.100.40"); w.Code != 200 {
			t.Fatalf("probe %d: status %d", i, w.Code)
		}
	}
	if w := s.probe(proxy, "X-Forwarded-For", "1.1.1.1, 198.51.100.40"); w.Code != 429 {
		t.Fatalf("forged left part: status %d, want 429", w.Code)
	}
	// Two header lines are one list; a second trusted hop is skipped.
	if w := s.probe(proxy, "X-Forwarded-For", "5.5.5.5", "X-Forwarded-For", "198.51.100.40, 10.1.2.3"); w.Code != 429 {
		t.Fatalf("split header, extra trusted hop: status %d, want 429", w.Code)
	}
	if w := s.probe(proxy, "X-Forwarded-For", "198.51.100.41"); w.Code != 200 {
		t.Fatalf("another client through the proxy: status %d", w.Code)
	}
	// The proxy's own requests, without a header, are keyed by the proxy.
	if w := s.probe(proxy); w.Code != 200 {
		t.Fatalf("the proxy itself: status %d", w.Code)
	}
}

func TestIPv6Aggregation(t *testing.T) {
	s := newTestServer(t)
	for i := 0; i < 10; i++ {
		// Ten addresses of one /64, each with a different interface ID.
		peer := "[2001:db8:1:2:" + strconv.FormatInt(int64(i+1), 16) + "::" + strconv.Itoa(i) + "]:443"
		if w := s.probe(peer); w.Code != 200 {
			t.Fatalf("probe %d from %s: status %d", i, peer, w.Code)
		}
	}
	if w := s.probe("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"); w.Code != 429 {
		t.Fatalf("same /64: status %d, want 429", w.Code)
	}
	if w := s.probe("[2001:db8:1:3::1]:1"); w.Code != 200 {
		t.Fatalf("next /64: status %d, want 200", w.Code)
	}
	if w := s.probe("[::ffff:198.51.100.90]:1"); w.Code != 200 {
		t.Fatalf("IPv4-mapped: status %d", w.Code)
	}
}

// run listens, serves real HTTP on loopback, and stops on cancellation.
func TestRunServesAndShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, &logs, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/auth/available/user_id?userId=root")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"data":false`) || resp.Header.Get("RateLimit") != `"user_id_probe";r=9;t=60` {
		t.Fatalf("status %d, RateLimit %q, body %s", resp.StatusCode, resp.Header.Get("RateLimit"), body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(exampleapp.ShutdownGrace + 5*time.Second):
		t.Fatal("server did not stop")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("logs: %s", logs.String())
	}
	if err := run(context.Background(), []string{"-trusted-proxy", "nonsense"}, io.Discard, nil); err == nil {
		t.Fatal("run accepted a bad -trusted-proxy")
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// macroNickname is the i-th nickname of a macro that varies its stem so
// that every nickname forms a fresh pattern: botaa0, botab1, … botzz9.
func macroNickname(i int) string {
	return "bot" + string(rune('a'+i/26%26)) + string(rune('a'+i%26)) + strconv.Itoa(i%10)
}

// TestSignupMacroVaryingStems: a macro that makes a fresh nickname pattern
// each time never meets the pattern limit, so before the per-IP ceiling
// it created 300 accounts from one IP in 5 s. The ceiling holds it to 30
// an hour, whatever the nicknames (issue 10 item 14).
func TestSignupMacroVaryingStems(t *testing.T) {
	patterns := map[string]bool{}
	for i := 0; i < 400; i++ {
		p, ok := floodgate.NormalizePattern(macroNickname(i))
		if !ok || patterns[p] {
			t.Fatalf("%s: pattern %q (ok %v) is not a fresh one", macroNickname(i), p, ok)
		}
		patterns[p] = true
	}
	s := newTestServer(t)
	const macro = "203.0.113.66:4000"
	created := 0
	for i := 0; i < 300; i++ {
		w := s.signup(macro, macroNickname(i))
		switch w.Code {
		case http.StatusCreated:
			if policyHeader(w, "RateLimit-Policy", "nickname") == "" {
				t.Fatalf("%s: not counted by its pattern (%v)", macroNickname(i), w.Header())
			}
			created++
			if created != i+1 {
				t.Fatalf("sign-up %d created after a refusal", i)
			}
		case http.StatusTooManyRequests:
			if got := policyHeader(w, "RateLimit", "signup_ip_ceiling"); !strings.HasPrefix(got, `"signup_ip_ceiling";r=0;`) {
				t.Fatalf("sign-up %d refused, but not by the ceiling: RateLimit %q", i, w.Header().Values("RateLimit"))
			}
		default:
			t.Fatalf("sign-up %d (%s): status %d %s", i, macroNickname(i), w.Code, w.Body)
		}
		if i%60 == 59 {
			s.clock.Advance(time.Second) // 300 attempts in 5 s
		}
	}
	if created != 30 {
		t.Fatalf("%d accounts from one IP in 5 s, want the ceiling's 30", created)
	}
	// An hour after the first, the ceiling has room again, for 30 more.
	s.clock.Advance(time.Hour - 5*time.Second)
	created = 0
	for i := 300; i < 400; i++ {
		if s.signup(macro, macroNickname(i)).Code == http.StatusCreated {
			created++
		}
	}
	if created != 30 {
		t.Fatalf("%d accounts in the next hour, want 30", created)
	}
	// Another address is not affected.
	if w := s.signup("203.0.113.67:4000", "fresh1"); w.Code != http.StatusCreated {
		t.Fatalf("another IP: status %d", w.Code)
	}
}

// TestSignupNATUsersNotBlockedTogether: behind one NAT address, a user
// who exhausts a nickname pattern blocks neither a user with another
// pattern nor one with no pattern; only the ceiling, 30 an hour, is
// shared by the address.
func TestSignupNATUsersNotBlockedTogether(t *testing.T) {
	s := newTestServer(t)
	nat := func(port int) string { return "198.51.100.77:" + strconv.Itoa(port) }
	for i := 1; i <= 5; i++ {
		if w := s.signup(nat(1000), "kim"+strconv.Itoa(i)); w.Code != http.StatusCreated {
			t.Fatalf("kim%d: status %d", i, w.Code)
		}
	}
	if w := s.signup(nat(1000), "kim6"); w.Code != http.StatusTooManyRequests || policyHeader(w, "RateLimit", "nickname") == "" {
		t.Fatalf("kim6: status %d, want the pattern's 429", w.Code)
	}
	if w := s.signup(nat(2000), "lee1"); w.Code != http.StatusCreated {
		t.Fatalf("another user behind the NAT, another pattern: status %d", w.Code)
	}
	if w := s.signup(nat(3000), "x"); w.Code != http.StatusCreated {
		t.Fatalf("another user behind the NAT, no pattern: status %d", w.Code)
	}
	// 8 attempts so far; 22 more distinct users fit under the ceiling.
	for i := 0; i < 22; i++ {
		if w := s.signup(nat(4000+i), "user"+string(rune('a'+i))+"1"); w.Code != http.StatusCreated {
			t.Fatalf("user %d behind the NAT: status %d", i, w.Code)
		}
	}
	w := s.signup(nat(5000), "park1")
	if w.Code != http.StatusTooManyRequests || policyHeader(w, "RateLimit", "signup_ip_ceiling") == "" {
		t.Fatalf("31st attempt from the NAT: status %d, RateLimit %q; want the ceiling's 429", w.Code, w.Header().Values("RateLimit"))
	}
}
