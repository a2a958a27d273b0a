package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; TestRedisDownFallsBack makes some.
	redis.SetLogger(quiet{})
	redistest.Main(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// instances builds n instances of the service, each with its own Redis
// client (alternately rueidis and go-redis), on one Redis and one key
// prefix, as n replicas behind a load balancer would be.
func instances(t *testing.T, n int, clock *floodgatetest.Clock) []http.Handler {
	t.Helper()
	addr := redistest.Shared(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "fgexample:" + hex.EncodeToString(b[:])
	var out []http.Handler
	for i := 0; i < n; i++ {
		client := []string{"rueidis", "go-redis"}[i%2]
		s, closeRedis, err := connect(client, []string{addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeRedis)
		h, err := newServer(config{Redis: s, Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h)
	}
	return out
}

func do(h http.Handler, method, target, peer, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.RemoteAddr = peer + ":40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestProbeLimitIsShared: two instances share one probe quota of 10 per
// 10 minutes per client IP; the 11th probe, on either, gets the service's
// envelope with Retry-After 60 s (one token back per minute).
func TestProbeLimitIsShared(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	hs := instances(t, 2, clock)
	const probe = "/auth/available/user_id?userId=bob"
	for i := 0; i < 10; i++ {
		if w := do(hs[i%2], http.MethodGet, probe, "192.0.2.7", ""); w.Code != http.StatusOK {
			t.Fatalf("probe %d on instance %d: %d %s", i+1, i%2, w.Code, w.Body)
		}
	}
	for i, h := range hs {
		w := do(h, http.MethodGet, probe, "192.0.2.7", "")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "60" ||
			!strings.Contains(w.Body.String(), `"resultCode":"BPLTE429"`) {
			t.Fatalf("11th probe on instance %d: %d Retry-After %q %s", i, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if w := do(hs[0], http.MethodGet, probe, "192.0.2.8", ""); w.Code != http.StatusOK {
		t.Fatalf("another client's probe: %d", w.Code)
	}
	clock.Advance(time.Minute)
	if w := do(hs[1], http.MethodGet, probe, "192.0.2.7", ""); w.Code != http.StatusOK {
		t.Fatalf("probe a minute later: %d %s", w.Code, w.Body)
	}
}

// TestSignupPatternIsShared: five sign-ups per minute per nickname pattern
// across instances; the sixth abc{NUM} is refused, another pattern is not.
func TestSignupPatternIsShared(t *testing.T) {
	clock := floodgatetest.NewClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	hs := instances(t, 3, clock)
	for i := 1; i <= 5; i++ {
		body := `{"nickname":"abc` + string(rune('0'+i)) + `"}`
		if w := do(hs[i%3], http.MethodPost, "/signup", "198.51.100.1", body); w.Code != http.StatusCreated {
			t.Fatalf("sign-up %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w := do(hs[0], http.MethodPost, "/signup", "198.51.100.2", `{"nickname":"abc999"}`); w.Code != http.StatusTooManyRequests {
		t.Fatalf("sixth abc{NUM} from another IP: %d %s", w.Code, w.Body)
	}
	if w := do(hs[1], http.MethodPost, "/signup", "198.51.100.1", `{"nickname":"zed7"}`); w.Code != http.StatusCreated {
		t.Fatalf("another pattern: %d %s", w.Code, w.Body)
	}
}

// TestRedisDownFallsBack: with Redis unreachable the in-memory fallback
// answers, so the probe is still limited (per instance) and never fails.
func TestRedisDownFallsBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	// go-redis dials lazily (rueidis would refuse to start).
	s, closeRedis, err := connect("go-redis", []string{dead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeRedis)
	h, err := newServer(config{Redis: s, Prefix: "fgexample:down", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if w := do(h, http.MethodGet, "/auth/available/user_id?userId=bob", "192.0.2.9", ""); w.Code != http.StatusOK {
			t.Fatalf("probe %d with Redis down: %d %s", i+1, w.Code, w.Body)
		}
	}
	if w := do(h, http.MethodGet, "/auth/available/user_id?userId=bob", "192.0.2.9", ""); w.Code != http.StatusTooManyRequests {
		t.Fatalf("11th probe with Redis down: %d, want the fallback's 429", w.Code)
	}
}

// TestRunServesAndShutsDown runs the command against the shared Redis on
// a free port and stops it.
func TestRunServesAndShutsDown(t *testing.T) {
	addr := redistest.Shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		// A prefix of its own per run: the shared server keeps the quota
		// of earlier runs (go test -count).
		p := "fgexample:run:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-redis", addr, "-client", "go-redis", "-prefix", p},
			io.Discard, func(a string) { ready <- a })
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	resp, err := http.Get("http://" + base + "/auth/available/user_id?userId=alice")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") == "" || !strings.Contains(string(body), "BPLTE200") {
		t.Fatalf("GET: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
}
