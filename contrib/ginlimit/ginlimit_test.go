package ginlimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

func init() { gin.SetMode(gin.TestMode) }

// frozen is a clock that never moves: no quota comes back during a test.
func frozen() floodgate.Option {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return floodgate.WithClock(func() time.Time { return t0 })
}

func bucket(t *testing.T, limit int) *floodgate.TokenBucket {
	t.Helper()
	b, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: limit, Period: time.Hour}, frozen())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counters count how often each stage of a gin chain ran.
type counters struct{ before, beforeAfterNext, after, handler atomic.Int32 }

// engine builds a gin engine with a middleware before the limit, the
// limit, a middleware after it and the handler, on a real server.
func engine(t *testing.T, limit gin.HandlerFunc, h gin.HandlerFunc) (*httptest.Server, *counters) {
	t.Helper()
	r, n := router(limit, h)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, n
}

func router(limit gin.HandlerFunc, h gin.HandlerFunc) (*gin.Engine, *counters) {
	n := &counters{}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		n.before.Add(1)
		c.Next()
		n.beforeAfterNext.Add(1)
	})
	r.POST("/login", limit, func(c *gin.Context) { n.after.Add(1); c.Next() }, func(c *gin.Context) {
		n.handler.Add(1)
		h(c)
	})
	return r, n
}

func post(t *testing.T, srv *httptest.Server, body string) *http.Response {
	t.Helper()
	resp, err := srv.Client().Post(srv.URL+"/login", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() }) // the test has read what it needs
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestDeniedAbortsChain: allowed requests run the rest of the chain
// exactly once with the quota headers; a denial is floodgate's 429 with
// its headers and body, and the handlers after the limit never run.
func TestDeniedAbortsChain(t *testing.T) {
	envelope, err := floodgate.StaticJSON([]byte(`{"resultCode":"BPLTE429","data":null}`))
	if err != nil {
		t.Fatal(err)
	}
	limit, err := ginlimit.New(bucket(t, 2), floodgate.WithDeniedHandler(envelope))
	if err != nil {
		t.Fatal(err)
	}
	srv, n := engine(t, limit, func(c *gin.Context) { c.String(http.StatusOK, "welcome") })
	for i, want := range []int{200, 200, 429, 429} {
		resp := post(t, srv, `{}`)
		body := readBody(t, resp)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %q, want %d", i, resp.StatusCode, body, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"default";q=2;w=3600` {
			t.Errorf("request %d: RateLimit-Policy %q", i, got)
		}
		if want == 429 {
			if body != `{"resultCode":"BPLTE429","data":null}` || resp.Header.Get("Retry-After") != "1800" ||
				resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("RateLimit") != `"default";r=0;t=1800` {
				t.Errorf("request %d: denied with %q, headers %v", i, body, resp.Header)
			}
		} else if body != "welcome" {
			t.Errorf("request %d: body %q", i, body)
		}
	}
	if n.before.Load() != 4 || n.beforeAfterNext.Load() != 4 || n.after.Load() != 2 || n.handler.Load() != 2 {
		t.Errorf("chain ran before=%d (after its Next %d), after-limit=%d, handler=%d; want 4, 4, 2, 2",
			n.before.Load(), n.beforeAfterNext.Load(), n.after.Load(), n.handler.Load())
	}
}

// TestCountStatusThroughGin counts only 401s, whichever way a gin handler
// sets its status: the status gin sends is the one floodgate sees.
func TestCountStatusThroughGin(t *testing.T) {
	writers := map[string]func(c *gin.Context, status int){
		"JSON":            func(c *gin.Context, s int) { c.JSON(s, gin.H{"ok": s == 200}) },
		"String":          func(c *gin.Context, s int) { c.String(s, "x") },
		"AbortWithStatus": func(c *gin.Context, s int) { c.AbortWithStatus(s) },
		"Status only":     func(c *gin.Context, s int) { c.Status(s) }, // gin writes the header after the chain
		"status changed before the first write": func(c *gin.Context, s int) {
			c.Status(http.StatusOK)
			c.Status(s)
			_, _ = c.Writer.WriteString("x")
		},
		"Data then Flush": func(c *gin.Context, s int) { c.Data(s, "text/plain", []byte("x")); c.Writer.Flush() },
	}
	for name, write := range writers {
		t.Run(name, func(t *testing.T) {
			refunds := make(chan struct{}, 8)
			limit, err := ginlimit.New(bucket(t, 2),
				floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }),
				floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) {
					if ev.AfterHandler {
						refunds <- struct{}{}
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			// In process: the handler's Flush sends the response before
			// the middleware has counted it, and a client on the network
			// could overtake the count.
			r, n := router(limit, func(c *gin.Context) {
				var in struct{ Password string }
				if err := c.ShouldBindJSON(&in); err != nil {
					c.AbortWithStatus(http.StatusBadRequest)
					return
				}
				if in.Password != "right" {
					write(c, http.StatusUnauthorized)
					return
				}
				write(c, http.StatusOK)
			})
			steps := []struct {
				password string
				want     int
			}{
				{"right", 200}, {"right", 200}, {"right", 200}, {"wrong", 401},
				{"right", 200}, {"wrong", 401}, {"right", 429}, {"wrong", 429},
			}
			for i, s := range steps {
				w := serveInProcess(r, httptest.NewRequest(http.MethodPost, "/login", bytes.NewBufferString(`{"Password":"`+s.password+`"}`)))
				if w.Code != s.want {
					t.Fatalf("step %d (%s): %d, want %d", i, s.password, w.Code, s.want)
				}
				if s.want == http.StatusOK {
					// A status gin sends without a body, after the chain,
					// is settled when the request's context ends.
					waitFor(t, refunds, "the refund of a 200")
				}
			}
			if got := n.handler.Load(); got != 6 {
				t.Errorf("handler ran %d times, want 6", got)
			}
		})
	}
}

// serveInProcess serves req as net/http does, whose server cancels the
// request's context once the handler has returned.
func serveInProcess(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(req.Context())
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req.WithContext(ctx))
	cancel()
	return w
}

// waitFor waits for one signal on ch, bounded.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

// TestBodyKeyAndDryRun: a key read from the JSON body leaves the body
// intact for gin's binding, and dry-run runs the chain once even when
// the limit would deny.
func TestBodyKeyAndDryRun(t *testing.T) {
	var seen []string
	user, err := floodgate.KeyByJSONField("user", 1024)
	if err != nil {
		t.Fatal(err)
	}
	limit, err := ginlimit.New(bucket(t, 1),
		floodgate.WithKeyFunc(user),
		floodgate.WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	srv, n := engine(t, limit, func(c *gin.Context) {
		var in struct {
			User string `json:"user"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		seen = append(seen, in.User)
		c.Status(http.StatusNoContent)
	})
	for range 2 {
		resp := post(t, srv, `{"user":"ann"}`)
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("dry run: %d, want 204", resp.StatusCode)
		}
		if resp.Header.Get("RateLimit") == "" {
			t.Error("dry run: no quota headers")
		}
	}
	if len(seen) != 2 || seen[0] != "ann" || seen[1] != "ann" || n.handler.Load() != 2 {
		t.Errorf("handler saw %v (%d runs), want the body twice", seen, n.handler.Load())
	}
}

// TestPolicyAndErrors: NewPolicy picks the policy per request; an
// unusable key fails closed; construction errors are floodgate's.
func TestPolicyAndErrors(t *testing.T) {
	user, err := floodgate.KeyByHeader("X-User")
	if err != nil {
		t.Fatal(err)
	}
	sel, err := floodgate.NewPolicySelector(floodgate.Policy{Name: "user", Limiter: bucket(t, 1), Key: user})
	if err != nil {
		t.Fatal(err)
	}
	limit, err := ginlimit.NewPolicy(sel)
	if err != nil {
		t.Fatal(err)
	}
	srv, n := engine(t, limit, func(c *gin.Context) { c.Status(http.StatusOK) })
	do := func(user string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	if resp := do("ann"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"user";q=1;w=3600` {
		t.Errorf("first: %d %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	if resp := do("ann"); resp.StatusCode != 429 {
		t.Errorf("second: %d, want 429", resp.StatusCode)
	}
	if resp := do(""); resp.StatusCode < 400 || resp.StatusCode == 429 {
		t.Errorf("no key: %d, want a refusal that is not a denial", resp.StatusCode)
	}
	if n.handler.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", n.handler.Load())
	}

	if _, err := ginlimit.New(nil); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := ginlimit.NewPolicy(sel, floodgate.WithKeyFunc(floodgate.KeyByMethod())); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("NewPolicy with a key function: %v", err)
	}
	if _, err := ginlimit.NewRoutes(nil); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("NewRoutes(nil): %v", err)
	}
}

// TestRoutes limits by a route table inside gin.
func TestRoutes(t *testing.T) {
	byIP, err := floodgate.KeyByIP()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := floodgate.NewRoutes(floodgate.Route{Pattern: "POST /login",
		Policies: []floodgate.Policy{{Name: "login", Limiter: bucket(t, 1), Key: byIP}}})
	if err != nil {
		t.Fatal(err)
	}
	limit, err := ginlimit.NewRoutes(rt)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := engine(t, limit, func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{}) })
	var codes []int
	for range 3 {
		codes = append(codes, post(t, srv, `{}`).StatusCode)
	}
	if b, _ := json.Marshal(codes); string(b) != "[200,429,429]" {
		t.Errorf("codes %s, want [200,429,429]", b)
	}
}

// TestHijackThroughGin: a handler that takes over the connection (a
// WebSocket upgrade, say) does so through the middleware's writer, which
// counts it as status 101.
func TestHijackThroughGin(t *testing.T) {
	limit, err := ginlimit.New(bucket(t, 1),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusSwitchingProtocols }))
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	done := make(chan struct{}, 2) // a request's chain, the count included, is over
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Next(); done <- struct{}{} })
	r.POST("/login", limit, func(c *gin.Context) {
		handled.Add(1)
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer func() { _ = conn.Close() }() // the raw response below is all there is
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = rw.Flush()
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	for i, want := range []int{101, 429} {
		resp := post(t, srv, `{}`)
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
		// The client has its answer as soon as the handler writes it; the
		// count comes after the handler returns.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the request's chain never finished")
		}
	}
	if handled.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", handled.Load())
	}
}
