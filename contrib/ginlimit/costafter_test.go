package ginlimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

// costRouter limits GET /work of a default gin engine (no
// ContextWithFallback), served through Serve so that each call settles
// when the engine returns, with a bucket of 10 an hour charged the cost the
// handler reports; h is the handler.
func costRouter(t *testing.T, h gin.HandlerFunc, opts ...floodgate.MiddlewareOption) (http.Handler, *floodgate.TokenBucket) {
	t.Helper()
	b := bucket(t, 10)
	limit, err := ginlimit.New(b, append([]floodgate.MiddlewareOption{floodgate.WithKeyFunc(floodgate.KeyByMethod())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.GET("/work", limit, h)
	return ginlimit.Serve(r), b
}

func remaining(t *testing.T, b *floodgate.TokenBucket) int {
	t.Helper()
	d, err := b.AllowN(context.Background(), "GET", 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// The natural call, floodgate.ReportCost with the *gin.Context, reaches
// the limit's meter, as does the request's context and a copy of the
// gin context (c.Copy, for a goroutine); the call is charged the report,
// not the estimate. Before the fix gin's Context.Value did not look in
// the request's context (no ContextWithFallback), ReportCost failed, and
// a handler that ignored the error was charged its estimate of 1.
func TestReportCostWithGinContext(t *testing.T) {
	for name, report := range map[string]func(c *gin.Context, n int) error{
		"gin context":     func(c *gin.Context, n int) error { return floodgate.ReportCost(c, n) },
		"request context": func(c *gin.Context, n int) error { return floodgate.ReportCost(c.Request.Context(), n) },
		"copied context":  func(c *gin.Context, n int) error { return floodgate.ReportCost(c.Copy(), n) },
	} {
		t.Run(name, func(t *testing.T) {
			var got error
			r, b := costRouter(t, func(c *gin.Context) {
				got = report(c, 7)
				c.Status(http.StatusOK)
			}, floodgate.WithCostAfter(floodgate.CostReported))
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/work", nil))
			if got != nil || rec.Code != http.StatusOK {
				t.Fatalf("ReportCost: %v, status %d", got, rec.Code)
			}
			if left := remaining(t, b); left != 3 {
				t.Errorf("%d left of 10, want 3: the call costs the 7 it reported", left)
			}
		})
	}
}

// A handler behind a limit that does not charge after the response gets
// the error, and so does a report from a goroutine after the handler
// returned: neither is charged, and the error says so.
func TestReportCostWithGinContextRefused(t *testing.T) {
	var got error
	r, b := costRouter(t, func(c *gin.Context) { got = floodgate.ReportCost(c, 7) })
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/work", nil))
	if !errors.Is(got, floodgate.ErrInvalidOption) || remaining(t, b) != 9 {
		t.Errorf("no metered limit: %v, %d left; want ErrInvalidOption and 9 left", got, remaining(t, b))
	}

	var copied *gin.Context
	r, b = costRouter(t, func(c *gin.Context) { copied = c.Copy() }, floodgate.WithCostAfter(floodgate.CostReported))
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/work", nil))
	if err := floodgate.ReportCost(copied, 7); !errors.Is(err, floodgate.ErrInvalidOption) || remaining(t, b) != 9 {
		t.Errorf("report after the handler: %v, %d left; want ErrInvalidOption and the estimate's 9 left", err, remaining(t, b))
	}
}
