package ginlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
