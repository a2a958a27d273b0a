package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// End-to-end attack regressions (issue 10): the README's configurations,
// as the example server runs them, attacked through real HTTP on
// loopback. Unlike server_test.go these go through run(): the flags, the
// listener and net/http's own routing (HEAD to a GET pattern) included.
// The server uses the real clock; every attack here is over in well under
// a second against limits counted in minutes and hours.

// liveServer is the example server listening on loopback.
type liveServer struct {
	t      *testing.T
	base   string
	client *http.Client
}

// startServer runs the example server with args on a loopback port until
// the test ends.
func startServer(t *testing.T, args ...string) *liveServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, &logs, func(a string) { addrc <- a }) }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		cancel()
		t.Skipf("skipping: the example server cannot listen on loopback: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the example server did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(exampleapp.ShutdownGrace + 5*time.Second):
			t.Error("the example server did not stop")
		}
	})
	return &liveServer{t: t, base: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
}

// do sends one request; headers are name, value pairs.
func (s *liveServer) do(method, path, body string, headers ...string) *http.Response {
	s.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// TestAttackHeadProbe: net/http routes HEAD to the "GET
// /auth/available/user_id" pattern, and a HEAD answer's Content-Length
// tells a taken user ID from a free one, so HEAD probes must draw from the
// GET quota. Issue 10 item 1.
func TestAttackHeadProbe(t *testing.T) {
	s := startServer(t)
	const path = "/auth/available/user_id?userId="
	free := s.do(http.MethodHead, path+"nobody", "")
	taken := s.do(http.MethodHead, path+"alice", "")
	if free.StatusCode != 200 || taken.StatusCode != 200 || free.ContentLength == taken.ContentLength {
		t.Fatalf("HEAD answers %d/%d with lengths %d/%d; the test assumes they differ", free.StatusCode, taken.StatusCode,
			free.ContentLength, taken.ContentLength)
	}
	for i := 2; i < 10; i++ {
		method := http.MethodGet
		if i%2 == 0 {
			method = http.MethodHead
		}
		if r := s.do(method, path+"u"+strconv.Itoa(i), ""); r.StatusCode != 200 {
			t.Fatalf("probe %d (%s): status %d", i+1, method, r.StatusCode)
		}
	}
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		r := s.do(method, path+"bob", "")
		if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
			t.Errorf("11th probe by %s: status %d, Retry-After %q; want 429: HEAD and GET share the quota",
				method, r.StatusCode, r.Header.Get("Retry-After"))
		}
	}
}

// TestAttackSignupMacro: a macro varying its nickname stems (botaa0,
// botab1, …) from one address, as fast as loopback allows, creates no
// more accounts than the per-IP ceiling. Issue 10 item 14.
func TestAttackSignupMacro(t *testing.T) {
	s := startServer(t)
	created, refused := 0, 0
	for i := 0; i < 300; i++ {
		body, _ := json.Marshal(map[string]string{"nickname": macroNickname(i)})
		switch r := s.do(http.MethodPost, "/signup", string(body)); r.StatusCode {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("sign-up %d: status %d", i, r.StatusCode)
		}
	}
	if created != 30 || refused != 270 {
		t.Fatalf("%d created, %d refused from one address; want 30 and 270", created, refused)
	}
}

// TestAttackSpoofedForwardedFor: with no trusted proxy (and with one
// configured that is not the peer), a client rotating X-Forwarded-For,
// X-Real-IP and Forwarded values is still one client: it gets the probe
// quota once and the sign-up ceiling once.
func TestAttackSpoofedForwardedFor(t *testing.T) {
	spoof := func(i int) []string {
		a := "10.9." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250+1)
		return []string{"X-Forwarded-For", a, "X-Real-IP", a, "Forwarded", "for=" + a}
	}
	for _, args := range [][]string{nil, {"-trusted-proxy", "10.0.0.0/8"}} {
		t.Run("args="+strings.Join(args, " "), func(t *testing.T) {
			s := startServer(t, args...)
			for i := 0; i < 10; i++ {
				if r := s.do(http.MethodGet, "/auth/available/user_id?userId=x", "", spoof(i)...); r.StatusCode != 200 {
					t.Fatalf("probe %d: status %d", i, r.StatusCode)
				}
			}
			if r := s.do(http.MethodGet, "/auth/available/user_id?userId=x", "", spoof(99)...); r.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("11th probe with a fresh spoofed address: status %d, want 429", r.StatusCode)
			}
			created := 0
			for i := 0; i < 40; i++ {
				body, _ := json.Marshal(map[string]string{"nickname": macroNickname(i)})
				if s.do(http.MethodPost, "/signup", string(body), spoof(100+i)...).StatusCode == http.StatusCreated {
					created++
				}
			}
			if created != 30 {
				t.Fatalf("%d sign-ups with 40 spoofed addresses, want the one real address's ceiling of 30", created)
			}
		})
	}
}
