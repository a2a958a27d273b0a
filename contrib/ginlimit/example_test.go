package ginlimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

// A gin login route that counts only failed attempts: 2 wrong passwords
// per 15 minutes per client IP, successful logins free. The status the
// handler sets through gin is the one floodgate counts.
func ExampleNew() {
	gin.SetMode(gin.ReleaseMode)
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	failures, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: 15 * time.Minute},
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	limit, err := ginlimit.New(failures,
		floodgate.WithPolicyName("login-failures"),
		floodgate.WithCountStatus(func(status int) bool { return status == http.StatusUnauthorized }))
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.POST("/login", limit, func(c *gin.Context) {
		if c.PostForm("password") != "right" {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.String(http.StatusOK, "welcome")
	})

	for _, password := range []string{"right", "wrong", "right", "wrong", "right"} {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader("password="+password))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%s %d Retry-After=%q\n", password, w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// right 200 Retry-After=""
	// wrong 401 Retry-After=""
	// right 200 Retry-After=""
	// wrong 401 Retry-After=""
	// right 429 Retry-After="450"
}

// bodyLog is the usual response-capturing gin.ResponseWriter of an access
// log: it embeds gin's writer and tees the body.
type bodyLog struct {
	gin.ResponseWriter
	n int
}

func (w *bodyLog) Write(b []byte) (int, error) { w.n += len(b); return w.ResponseWriter.Write(b) }

// A login whose failures an error middleware registered before the limit
// answers, with an access log between them that swaps gin's writer in and
// out: served through Serve, the limit counts the 401 the client gets.
func ExampleServe() {
	gin.SetMode(gin.ReleaseMode)
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	failures, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 2, Period: 15 * time.Minute},
		floodgate.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	limit, err := ginlimit.New(failures,
		floodgate.WithCountStatus(func(status int) bool { return status == http.StatusUnauthorized }))
	if err != nil {
		panic(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) { // errors to responses
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(http.StatusUnauthorized, gin.H{"error": c.Errors.Last().Error()})
		}
	})
	r.Use(func(c *gin.Context) { // an access log capturing the body
		orig := c.Writer
		c.Writer = &bodyLog{ResponseWriter: orig}
		defer func() { c.Writer = orig }()
		c.Next()
	})
	r.POST("/login", limit, func(c *gin.Context) {
		_ = c.Error(errors.New("wrong password"))
	})
	server := ginlimit.Serve(r) // http.ListenAndServe(addr, server)

	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/login", nil)
		req.RemoteAddr = "203.0.113.7:51234"
		w := httptest.NewRecorder()
		server.ServeHTTP(w, req)
		fmt.Println(w.Code)
	}
	// Output:
	// 401
	// 401
	// 429
}
