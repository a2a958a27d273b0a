package ginlimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

// Issue 18 §5: a login handler that reports a wrong password with
// c.Error and returns, and an error middleware registered before the
// limit (r.Use) that answers 401 after c.Next(). The 401 is what the
// client gets, so it is what counts: 10 wrong passwords on a quota of 3
// reach the handler 3 times, however the error middleware writes it.
// (Before: every attempt was counted as the 200 gin held when the limit's
// chain returned, and refunded: 10 of 10 ran.)
func TestStatusWrittenBeforeTheLimitCounts(t *testing.T) {
	writers := map[string]func(c *gin.Context){
		"JSON":                 func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{"error": c.Errors.Last().Error()}) },
		"AbortWithStatusJSON":  func(c *gin.Context) { c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "bad"}) },
		"AbortWithStatus":      func(c *gin.Context) { c.AbortWithStatus(http.StatusUnauthorized) },
		"String":               func(c *gin.Context) { c.String(http.StatusUnauthorized, "bad") },
		"Status only, no body": func(c *gin.Context) { c.Status(http.StatusUnauthorized) }, // sent by gin after the chain
		"Header then WriteHead": func(c *gin.Context) {
			c.Header("X-Reason", "bad")
			c.Writer.WriteHeader(401)
			c.Writer.WriteHeaderNow()
		},
	}
	for name, answer := range writers {
		for _, real := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/real server %v", name, real), func(t *testing.T) { outerStatusCounts(t, answer, real) })
		}
	}
}

// outerStatusCounts runs 10 wrong passwords against a quota of 3, in
// process or through a real server and client.
func outerStatusCounts(t *testing.T, answer func(*gin.Context), real bool) {
	limit, err := ginlimit.New(bucket(t, 3),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) { // the error middleware, before the limit
		c.Next()
		if len(c.Errors) > 0 {
			answer(c)
		}
	})
	r.POST("/login", limit, func(c *gin.Context) {
		ran.Add(1)
		_ = c.Error(errors.New("wrong password"))
	})
	var codes []int
	if real {
		srv := httptest.NewServer(r)
		defer srv.Close()
		for range 10 {
			codes = append(codes, post(t, srv, "").StatusCode)
		}
	} else {
		for range 10 {
			codes = append(codes, serveInProcess(r, newLogin()).Code)
		}
	}
	if ran.Load() != 3 {
		t.Errorf("the handler ran %d times on a quota of 3 (statuses %v)", ran.Load(), codes)
	}
	for i, code := range codes {
		if want := map[bool]int{true: 401, false: 429}[i < 3]; code != want {
			t.Errorf("attempt %d: %d, want %d (all: %v)", i, code, want, codes)
		}
	}
}

// The honest side of the same set-up: successful logins, answered by the
// handler or by gin's default 200 after the chain, are given back, so a
// user who logs in 10 times on a quota of 3 is never refused.
func TestSuccessAfterOuterMiddlewareIsRefunded(t *testing.T) {
	refunds := make(chan struct{}, 16)
	limit, err := ginlimit.New(bucket(t, 3),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }),
		floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) {
			if ev.AfterHandler && ev.Err == nil {
				refunds <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(http.StatusUnauthorized, gin.H{})
		}
	})
	var i int
	r.POST("/login", limit, func(c *gin.Context) {
		if i++; i%2 == 0 {
			c.String(http.StatusOK, "welcome") // answered by the handler
		} // else gin sends 200 after the chain, with no body
	})
	for n := range 10 {
		if w := serveInProcess(r, newLogin()); w.Code != http.StatusOK {
			t.Fatalf("login %d: %d, want 200", n, w.Code)
		}
		waitFor(t, refunds, "the refund of a successful login")
	}
}

// A handler that panics is counted, whatever gin.Recovery (registered
// before the limit) then writes: 2 panics spend a quota of 2.
func TestPanicUnderRecoveryCounts(t *testing.T) {
	limit, err := ginlimit.New(bucket(t, 2),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(nopWriter{}, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusOK) }))
	r.POST("/login", limit, func(c *gin.Context) {
		ran.Add(1)
		panic("boom")
	})
	var codes []int
	for range 4 {
		codes = append(codes, serveInProcess(r, newLogin()).Code)
	}
	if ran.Load() != 2 || codes[2] != 429 || codes[3] != 429 {
		t.Errorf("handler ran %d times, statuses %v; want 2 runs, then 429", ran.Load(), codes)
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }

func newLogin() *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "/login", nil)
	req.RemoteAddr = "203.0.113.9:4000"
	return req
}

// accessLog swaps c.Writer for a bodyLog and, as such middleware does,
// puts the original back once the chain has returned.
func accessLog(c *gin.Context) {
	orig := c.Writer
	c.Writer = &bodyLog{ResponseWriter: orig}
	defer func() { c.Writer = orig }()
	c.Next()
}

// loginChain is the red team's set-up (finding 7): an error middleware
// answering 401 after c.Next() for a handler's c.Error, an access log
// between it and the limit, the limit counting 401s on a quota of 3, and
// a login handler that fails when fail says so.
func loginChain(t *testing.T, answer func(*gin.Context), fail func() bool, opts ...floodgate.MiddlewareOption) (*gin.Engine, *atomic.Int32) {
	t.Helper()
	opts = append(opts, floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	limit, err := ginlimit.New(bucket(t, 3), opts...)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 {
			answer(c)
		}
	})
	r.Use(accessLog)
	r.POST("/login", limit, func(c *gin.Context) {
		ran.Add(1)
		if fail() {
			_ = c.Error(errors.New("wrong password"))
		}
	})
	return r, &ran
}

// Red-team finding 7: the error middleware writes the 401 through gin's
// own writer, which the access log put back around the limit, so the
// limit's writer never sees it. Served through ginlimit.Serve, the limit
// settles by the status written beneath gin: 10 wrong passwords on a
// quota of 3 reach the handler 3 times, however the 401 is written, over
// a real server. (Without Serve: 10 of 10, each counted as 200 and
// refunded.)
func TestOuterStatusThroughRestoredWriterWithServe(t *testing.T) {
	writers := map[string]func(c *gin.Context){
		"JSON":                 func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{"error": c.Errors.Last().Error()}) },
		"AbortWithStatus":      func(c *gin.Context) { c.AbortWithStatus(http.StatusUnauthorized) },
		"Status only, no body": func(c *gin.Context) { c.Status(http.StatusUnauthorized) },
	}
	for name, answer := range writers {
		t.Run(name, func(t *testing.T) {
			r, ran := loginChain(t, answer, func() bool { return true })
			srv := httptest.NewServer(ginlimit.Serve(r))
			defer srv.Close()
			var codes []int
			for range 10 {
				codes = append(codes, post(t, srv, "").StatusCode)
			}
			if ran.Load() != 3 {
				t.Errorf("the handler ran %d times on a quota of 3 (statuses %v)", ran.Load(), codes)
			}
			for i, code := range codes {
				if want := map[bool]int{true: 401, false: 429}[i < 3]; code != want {
					t.Errorf("attempt %d: %d, want %d (all: %v)", i, code, want, codes)
				}
			}
		})
	}
}

// The honest side, through the same chain and Serve: successful logins
// are given back, also when gin sends the 200 after the chain, and
// failures and successes mix exactly.
func TestSuccessThroughRestoredWriterWithServe(t *testing.T) {
	var refunds atomic.Int32
	i := 0
	r, ran := loginChain(t, func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{}) },
		func() bool { i++; return i%4 == 0 }, // every fourth login fails
		floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) {
			if ev.AfterHandler && ev.Err == nil {
				refunds.Add(1)
			}
		}))
	srv := httptest.NewServer(ginlimit.Serve(r))
	defer srv.Close()
	var codes []int
	for range 14 {
		codes = append(codes, post(t, srv, "").StatusCode)
	}
	// Failures at 4, 8 and 12 spend the quota; the 13th and 14th are refused.
	want := []int{200, 200, 200, 401, 200, 200, 200, 401, 200, 200, 200, 401, 429, 429}
	if fmt.Sprint(codes) != fmt.Sprint(want) || ran.Load() != 12 || refunds.Load() != 9 {
		t.Errorf("statuses %v, handler ran %d times, %d refunds; want %v, 12 and 9", codes, ran.Load(), refunds.Load(), want)
	}
}

// A handler that panics under gin.Recovery counts with Serve too, whatever
// Recovery writes (here a 200 through a restored writer).
func TestPanicUnderRecoveryCountsWithServe(t *testing.T) {
	limit, err := ginlimit.New(bucket(t, 2),
		floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(nopWriter{}, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusOK) }))
	r.Use(accessLog)
	r.POST("/login", limit, func(c *gin.Context) {
		ran.Add(1)
		panic("boom")
	})
	srv := httptest.NewServer(ginlimit.Serve(r))
	defer srv.Close()
	var codes []int
	for range 4 {
		codes = append(codes, post(t, srv, "").StatusCode)
	}
	if ran.Load() != 2 || fmt.Sprint(codes) != "[200 200 429 429]" {
		t.Errorf("handler ran %d times, statuses %v; want 2 runs, then 429", ran.Load(), codes)
	}
}

// Without Serve the gap is visible: the first request whose response was
// not sent when the limit's chain returned logs one WARN naming Serve;
// with Serve, nothing.
func TestWithoutServeWarnsOnce(t *testing.T) {
	var log bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	defer slog.SetDefault(prev)
	r, _ := loginChain(t, func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{}) }, func() bool { return true })
	for range 5 {
		serveInProcess(r, newLogin())
	}
	if n := strings.Count(log.String(), "ginlimit.Serve(engine)"); n != 1 || !strings.Contains(log.String(), "level=WARN") {
		t.Errorf("%d WARN lines naming Serve, want 1: %s", n, log.String())
	}
	log.Reset()
	r2, _ := loginChain(t, func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{}) }, func() bool { return true })
	served := ginlimit.Serve(r2)
	for range 5 {
		serveInProcess(served, newLogin())
	}
	if log.Len() != 0 {
		t.Errorf("logged with Serve: %s", log.String())
	}
}

// Red-team finding 7 without Serve: the limit sees that a middleware
// before it swapped gin's writer, and a response not sent through the
// limit's own writer when its chain returned counts whatever its status.
// 10 wrong passwords on a quota of 3 reach the handler 3 times over a
// real server. (Before: 10 of 10, each settled as the 200 gin held.)
func TestOuterStatusThroughRestoredWriterCountsWithoutServe(t *testing.T) {
	r, ran := loginChain(t, func(c *gin.Context) { c.JSON(http.StatusUnauthorized, gin.H{"error": "bad"}) }, func() bool { return true })
	srv := httptest.NewServer(r)
	defer srv.Close()
	var codes []int
	for range 10 {
		codes = append(codes, post(t, srv, "").StatusCode)
	}
	if ran.Load() != 3 {
		t.Errorf("the handler ran %d times on a quota of 3 (statuses %v)", ran.Load(), codes)
	}
}

// What that costs the honest client without Serve: a success the handler
// answers with a body is seen and given back; a success gin sends after
// the chain, with no body, cannot be told from the error middleware's
// 401 and counts. With gin's own writer around the limit (no swap), the
// same bodiless success is given back (TestSuccessAfterOuterMiddleware-
// IsRefunded); with Serve, always (TestSuccessThroughRestoredWriterWithServe).
func TestSuccessThroughRestoredWriterWithoutServe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    bool
		wantRan int32
	}{{"answered with a body", true, 10}, {"bodiless 200 after the chain", false, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			limit, err := ginlimit.New(bucket(t, 3),
				floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int32
			r := gin.New()
			r.Use(accessLog)
			r.POST("/login", limit, func(c *gin.Context) {
				ran.Add(1)
				if tc.body {
					c.String(http.StatusOK, "welcome")
				}
			})
			srv := httptest.NewServer(r)
			defer srv.Close()
			for range 10 {
				post(t, srv, "")
			}
			if ran.Load() != tc.wantRan {
				t.Errorf("10 successful logins on a quota of 3: the handler ran %d times, want %d", ran.Load(), tc.wantRan)
			}
		})
	}
}
