package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/gin-gonic/gin"
)

// BenchmarkServe measures what Serve adds to a request through a gin
// engine whose limit counts by status (a successful login, given back),
// beside the same engine without it, in the same run.
func BenchmarkServe(b *testing.B) {
	lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1 << 20, Period: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	limit, err := ginlimit.New(lim, floodgate.WithCountStatus(func(s int) bool { return s == http.StatusUnauthorized }))
	if err != nil {
		b.Fatal(err)
	}
	r := gin.New()
	r.POST("/login", limit, func(c *gin.Context) { c.String(http.StatusOK, "welcome") })
	for _, tt := range []struct {
		name string
		h    http.Handler
	}{{"engine", r}, {"Serve(engine)", ginlimit.Serve(r)}} {
		b.Run(tt.name, func(b *testing.B) {
			req := newLogin()
			w := &discard{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				tt.h.ServeHTTP(w, req)
			}
		})
	}
}

// discard is a ResponseWriter that keeps nothing but its header map.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
