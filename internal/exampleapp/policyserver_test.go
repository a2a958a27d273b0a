package exampleapp

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/floodgatetest"
)

// rates are the limits of reloadFile, the file the reload tests change.
type rates struct {
	Probe, Reward, Signup int
	ProbeAlgo             string
	Headers               string
}

var v1 = rates{Probe: 5, Reward: 1, Signup: 1000, ProbeAlgo: "token_bucket", Headers: "ietf"}

// reloadFile returns a policy file of r that trusts 127.0.0.1, so that
// the tests choose client IPs with X-Forwarded-For over loopback.
func reloadFile(r rates) []byte {
	return []byte(fmt.Sprintf(`{
  "trustedProxies": ["127.0.0.1"],
  "policies": [
    {"name": "probe", "routes": ["GET /auth/available/user_id"], "key": {"ip": {}},
     "rate": {"limit": %d, "period": "10m", "algorithm": %q}},
    {"name": "reward_account", "routes": ["POST /rewards/claim"], "key": {"json": "accountId"},
     "rate": {"limit": %d, "period": "24h", "algorithm": "token_bucket"}},
    {"name": "signup_ip", "routes": ["POST /signup"], "key": {"ip": {}}, "headers": %q,
     "rate": {"limit": %d, "period": "1h", "algorithm": "sliding_log"}}
  ]
}`, r.Probe, r.ProbeAlgo, r.Reward, r.Headers, r.Signup))
}

// reloadServer is a PolicyServer on a fake clock behind a loopback
// HTTP server.
type reloadServer struct {
	t    *testing.T
	ps   *PolicyServer
	srv  *httptest.Server
	logs *syncBuffer
}

func newReloadServer(t *testing.T, r rates) *reloadServer {
	t.Helper()
	return newFileServer(t, reloadFile(r))
}

// newFileServer is a reloadServer of the policy file data.
func newFileServer(t *testing.T, data []byte) *reloadServer {
	t.Helper()
	clk := floodgatetest.NewClock(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC))
	logs := &syncBuffer{}
	ps, err := NewPolicyServer(data, PolicyOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ps)
	t.Cleanup(srv.Close)
	return &reloadServer{t: t, ps: ps, srv: srv, logs: logs}
}

// do sends a request as client ip and returns its status and
// RateLimit / RateLimit-Policy headers (each policy's, comma-joined).
func (s *reloadServer) do(method, path, ip, body string) (int, string, string, error) {
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("X-Forwarded-For", ip)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, strings.Join(resp.Header.Values("RateLimit"), ", "), strings.Join(resp.Header.Values("RateLimit-Policy"), ", "), nil
}

// expect sends a request and checks its status and, if not empty, the
// prefixes of its RateLimit and RateLimit-Policy headers.
func (s *reloadServer) expect(method, path, ip, body string, status int, rateLimit, policy string) {
	s.t.Helper()
	got, rl, pol, err := s.do(method, path, ip, body)
	if err != nil || got != status || !strings.HasPrefix(rl, rateLimit) || !strings.HasPrefix(pol, policy) {
		s.t.Fatalf("%s %s as %s: %d %q %q %v; want %d %q… %q", method, path, ip, got, rl, pol, err, status, rateLimit, policy)
	}
}

func (s *reloadServer) reload(r rates) ReloadReport {
	s.t.Helper()
	rep, err := s.ps.Reload(reloadFile(r))
	if err != nil {
		s.t.Fatalf("reload %+v: %v", r, err)
	}
	return rep
}

func (s *reloadServer) limiter(name string) policyLimiter {
	return s.ps.cur.Load().limiters[name].lim
}

// TestReloadUnderLoad: reloads while four clients sign up over loopback
// drop no request and answer none 5xx; a key whose policy did not
// change keeps its count through every reload, the state of a policy
// whose rate changed back and forth is kept, and a raised limit applies
// from the next decision on.
func TestReloadUnderLoad(t *testing.T) {
	s := newReloadServer(t, v1)
	const prober = "198.51.100.7"
	for i := 0; i < 3; i++ {
		s.expect("GET", "/auth/available/user_id?userId=bob", prober, "", 200, fmt.Sprintf(`"probe";r=%d;`, 4-i), `"probe";q=5;w=600`)
	}
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 200, `"reward_account";r=0;`, "")
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 429, `"reward_account";r=0;`, "")
	probeLimiter := s.limiter("probe")

	const workers, perWorker = 4, 100
	var bad atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip := fmt.Sprintf("203.0.113.%d", w+1)
			for i := 0; i < perWorker; i++ {
				status, _, _, err := s.do("POST", "/signup", ip, fmt.Sprintf(`{"nickname":"user%dx%d"}`, w, i))
				if err != nil || status != http.StatusCreated {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("%s #%d: %d %v", ip, i, status, err))
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	v2 := v1
	v2.Signup, v2.Headers = 2000, "both"
	reloads := 0
	for loop := true; loop && reloads < 1000; reloads++ {
		select {
		case <-done:
			loop = false
		default:
		}
		next := v1
		if reloads%2 == 0 {
			next = v2
		}
		s.reload(next)
	}
	<-done
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of %d sign-ups during %d reloads dropped, denied or failed; first: %v", n, workers*perWorker, reloads, firstBad.Load())
	}
	if reloads < 2 {
		t.Fatalf("only %d reloads during the load", reloads)
	}
	t.Logf("%d sign-ups, all 201, during %d reloads", workers*perWorker, reloads)

	s.reload(v1) // whichever the loop ended on

	// The last change: the reward account's limit from 1 to 3 a day.
	v3 := v1
	v3.Reward = 3
	rep := s.reload(v3)
	if want := []string{"reward_account"}; !reflect.DeepEqual(rep.Changed, want) || len(rep.Built) != 0 || len(rep.Dropped) != 0 {
		t.Errorf("report %+v, want only reward_account changed", rep)
	}
	if s.limiter("probe") != probeLimiter {
		t.Error("the unchanged probe policy got a new limiter")
	}
	// The prober's 3 probes are still counted: 2 left, then denied.
	s.expect("GET", "/auth/available/user_id?userId=bob", prober, "", 200, `"probe";r=1;`, "")
	s.expect("GET", "/auth/available/user_id?userId=bob", prober, "", 200, `"probe";r=0;`, "")
	s.expect("GET", "/auth/available/user_id?userId=bob", prober, "", 429, `"probe";r=0;`, "")
	// The account spent 1 of its new 3 (KeepUsed): 2 more, from the next decision.
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 200, `"reward_account";r=1;`, `"reward_account";q=3;w=86400`)
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 200, `"reward_account";r=0;`, "")
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 429, `"reward_account";r=0;`, "")
	// Each sign-up client's 100 are still in its log, whatever the
	// limit went through.
	s.expect("POST", "/signup", "203.0.113.1", `{"nickname":"last"}`, 201, `"signup_ip";r=899;`, `"signup_ip";q=1000;w=3600`)
}

// TestReloadReport: what a reload keeps, changes, builds and drops,
// and what each means for a key's state.
func TestReloadReport(t *testing.T) {
	s := newReloadServer(t, v1)
	const ip = "198.51.100.9"
	s.expect("GET", "/auth/available/user_id?userId=bob", ip, "", 200, `"probe";r=4;`, "")
	if rep := s.reload(v1); len(rep.Kept) != 3 || len(rep.Changed)+len(rep.Built)+len(rep.Dropped) != 0 {
		t.Errorf("same file: %+v, want all 3 kept", rep)
	}
	s.expect("GET", "/auth/available/user_id?userId=bob", ip, "", 200, `"probe";r=3;`, "")

	// A new algorithm is a new limiter: the key starts fresh.
	sl := v1
	sl.ProbeAlgo = "sliding_log"
	if rep := s.reload(sl); !reflect.DeepEqual(rep.Built, []string{"probe"}) || len(rep.Kept) != 2 {
		t.Errorf("new algorithm: %+v, want probe built, 2 kept", rep)
	}
	s.expect("GET", "/auth/available/user_id?userId=bob", ip, "", 200, `"probe";r=4;`, "")

	// A policy left out is dropped; put back, it is new.
	short := []byte(`{"policies": [{"name": "probe", "routes": ["GET /auth/available/user_id"], "key": {"ip": {}},
		"rate": {"limit": 5, "period": "10m", "algorithm": "sliding_log"}}]}`)
	rep, err := s.ps.Reload(short)
	if err != nil {
		t.Fatal(err)
	}
	// Without trusted proxies, the key is still an IP key of the same shape.
	if !reflect.DeepEqual(rep.Kept, []string{"probe"}) || len(rep.Dropped) != 2 {
		t.Errorf("two policies left out: %+v, want probe kept, 2 dropped", rep)
	}
}

// TestReloadRefusedKeepsLimits: a file refused on reload, at parsing or
// at building, changes nothing: not the set served, not a rate it would
// have changed; the refusal is logged with the error.
func TestReloadRefusedKeepsLimits(t *testing.T) {
	s := newReloadServer(t, v1)
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 200, `"reward_account";r=0;`, "")
	before := s.ps.cur.Load()
	raised := v1
	raised.Reward = 3
	good := string(reloadFile(raised)) // raises the reward limit
	bad := []struct{ name, file, want string }{
		{"not JSON", good[:len(good)/2], "not JSON"},
		{"invalid rate", strings.Replace(good, `"limit": 5,`, `"limit": 0,`, 1), "policies[0].rate.limit: must be > 0"},
		{"invalid route, after a valid change", strings.Replace(good, `"POST /signup"`, `"POST /{x}/{x}"`, 1), "policies[2].routes[0]: "},
		{"trusting everyone", strings.Replace(good, `"127.0.0.1"`, `"::/0"`, 1), "trustedProxies: "},
		{"unknown field", strings.Replace(good, `"headers"`, `"header"`, 1), "policies[2].header: unknown field"},
	}
	dir := t.TempDir()
	for i, b := range bad {
		path := filepath.Join(dir, fmt.Sprintf("bad%d.json", i))
		if err := os.WriteFile(path, []byte(b.file), 0o600); err != nil {
			t.Fatal(err)
		}
		err := s.ps.ReloadFile(path)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: reload error %v, want %q", b.name, err, b.want)
		}
		if s.ps.cur.Load() != before {
			t.Errorf("%s: the set served changed", b.name)
		}
		if !strings.Contains(s.logs.String(), `"msg":"policy file refused, limits unchanged","file":"`+path) {
			t.Errorf("%s: refusal not logged:\n%s", b.name, s.logs.String())
		}
	}
	if err := s.ps.ReloadFile(filepath.Join(dir, "missing.json")); err == nil || s.ps.cur.Load() != before {
		t.Errorf("a missing file: error %v, set changed %v", err, s.ps.cur.Load() != before)
	}
	// The old limit holds: 1 a day, spent.
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 429, `"reward_account";r=0;`, `"reward_account";q=1;w=86400`)
	// And the good file still goes through, logged.
	path := filepath.Join(dir, "good.json")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.ps.ReloadFile(path); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.logs.String(), `"msg":"policies reloaded","file":"`+path+`","kept":["probe","signup_ip"],"changed":["reward_account"]`) {
		t.Errorf("reload not logged:\n%s", s.logs.String())
	}
	s.expect("POST", "/rewards/claim", "198.51.100.8", `{"accountId":"acct"}`, 200, `"reward_account";r=1;`, `"reward_account";q=3;w=86400`)
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOverlappingRoutes: a request is limited by every policy one of
// whose routes it matches, in file order, as a ServeMux matches
// patterns: "/" takes every request, a GET pattern takes HEAD, and the
// first policy listed decides first.
func TestOverlappingRoutes(t *testing.T) {
	s := newFileServer(t, []byte(`{"trustedProxies": ["127.0.0.1"], "policies": [
		{"name": "all", "routes": ["/"], "key": {"ip": {}}, "rate": {"limit": 4, "period": "1h", "algorithm": "sliding_log"}},
		{"name": "signup", "routes": ["POST /signup", "GET /auth/available/user_id"], "key": {"ip": {}}, "rate": {"limit": 100, "period": "1h", "algorithm": "token_bucket"}}
	]}`))
	const ip = "198.51.100.20"
	s.expect("POST", "/signup", ip, `{"nickname":"x"}`, 201, `"all";r=3;`, `"all";q=4;w=3600`)
	s.expect("HEAD", "/auth/available/user_id?userId=x", ip, "", 200, `"all";r=2;`, "")
	s.expect("GET", "/healthz", ip, "", 200, `"all";r=1;`, "")
	if _, rl, _, _ := s.do("GET", "/healthz", "198.51.100.21", ""); strings.Contains(rl, "signup") {
		t.Errorf("GET /healthz limited by the signup policy: %q", rl)
	}
	_, rl, _, _ := s.do("POST", "/signup", ip, `{"nickname":"y"}`)
	if !strings.HasPrefix(rl, `"all";r=0;`) || !strings.Contains(rl, `, "signup";r=97;`) {
		t.Errorf("a sign-up matching both: RateLimit %q, want both policies", rl)
	}
	// The 5th request: denied by "all", which comes first; "signup" is
	// not charged.
	s.expect("POST", "/signup", ip, `{"nickname":"z"}`, 429, `"all";r=0;`, "")
	if h := s.ps.cur.Load().handler.(*dispatcher); len(*h.chains.Load()) != 3 {
		t.Errorf("%d chains kept, want 3 (\"/\" alone, and with each other route)", len(*h.chains.Load()))
	}
}

// TestDispatcherChainsBounded: past maxChains sets of matches, chains are
// built per request and not kept, so the cache cannot grow without bound.
func TestDispatcherChainsBounded(t *testing.T) {
	var calls atomic.Int64
	count := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); h.ServeHTTP(w, r) })
	}
	d := &dispatcher{mux: http.NotFoundHandler(), policies: []routedMiddleware{{mw: count, routes: 1}}}
	d.chains.Store(&map[uint64]http.Handler{})
	for mask := uint64(0); mask < 2*maxChains; mask++ {
		d.chain(mask).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	if n := len(*d.chains.Load()); n != maxChains {
		t.Errorf("%d chains kept, want %d", n, maxChains)
	}
	if n := calls.Load(); n != maxChains { // the odd masks hold bit 1
		t.Errorf("the policy ran %d times, want %d", n, maxChains)
	}
}
