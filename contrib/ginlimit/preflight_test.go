package ginlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

const pageOrigin = "https://app.example"

// corsMiddleware is a gin CORS middleware of the usual shape
// (gin-contrib/cors): it answers a preflight itself, 204 with the allow
// headers, and lets other requests on with Access-Control-Allow-Origin.
func corsMiddleware(c *gin.Context) {
	if c.GetHeader("Origin") != pageOrigin {
		c.Next()
		return
	}
	c.Header("Access-Control-Allow-Origin", pageOrigin)
	if c.Request.Method == http.MethodOptions {
		c.Header("Access-Control-Allow-Methods", "POST")
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	c.Next()
}

func preflightTo(srv *httptest.Server, path string) (int, error) {
	req, _ := http.NewRequest(http.MethodOptions, srv.URL+path, nil)
	req.Header.Set("Origin", pageOrigin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Through gin, with and without Serve: a browser's preflight answered by
// the CORS middleware inside the limit leaves the quota as it was, and a
// request dressed as one at a handler that serves every method is counted
// (the handler runs the quota's 3 times for 10).
func TestPreflightThroughGin(t *testing.T) {
	for _, served := range []bool{false, true} {
		t.Run(fmt.Sprintf("Serve %v", served), func(t *testing.T) {
			lim := bucket(t, 3)
			limit, err := ginlimit.New(lim)
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int32
			r := gin.New()
			r.Use(limit, corsMiddleware)
			r.POST("/api/order", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			r.Any("/probe", func(c *gin.Context) { ran.Add(1); c.Status(http.StatusNoContent) })
			var h http.Handler = r
			if served {
				h = ginlimit.Serve(r)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			for i := range 5 {
				if code, err := preflightTo(srv, "/api/order"); err != nil || code != http.StatusNoContent {
					t.Fatalf("preflight %d: %d, %v", i, code, err)
				}
			}
			if d, _ := lim.AllowN(context.Background(), "127.0.0.1", 0); d.Remaining != 3 {
				t.Errorf("%d of 3 left after 5 preflights", d.Remaining)
			}
			var codes []int
			for range 10 {
				req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/probe", nil)
				req.Header.Set("Origin", "https://evil.example")
				req.Header.Set("Access-Control-Request-Method", "GET")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				codes = append(codes, resp.StatusCode)
			}
			if ran.Load() != 3 {
				t.Errorf("the handler ran %d times for 10 dressed preflights on a quota of 3 (statuses %v)", ran.Load(), codes)
			}
		})
	}
}
