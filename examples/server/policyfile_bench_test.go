package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// BenchmarkProbe: an allowed username probe through the built-in limits
// and through the same limits from policies.json (a PolicyServer: one
// atomic load more per request), over 4,096 client IPs already in the
// stores.
func BenchmarkProbe(b *testing.B) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	clk := floodgatetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	builtIn, err := newServer(config{Logger: logger, Clock: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("policies.json")
	if err != nil {
		b.Fatal(err)
	}
	fromFile, err := exampleapp.NewPolicyServer(data, exampleapp.PolicyOptions{Logger: logger, Clock: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"builtin", builtIn}, {"file", fromFile}} {
		b.Run(bc.name, func(b *testing.B) {
			const clients = 4096
			reqs := make([]*http.Request, clients)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/auth/available/user_id?userId=newuser", nil)
				reqs[i].RemoteAddr = fmt.Sprintf("10.%d.%d.1:1234", i>>8, i&255)
				bc.h.ServeHTTP(httptest.NewRecorder(), reqs[i]) // populate
			}
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%(clients*8) == 0 {
					b.StopTimer()
					clk.Advance(10 * time.Minute) // refill everyone: every probe allowed
					b.StartTimer()
				}
				clear(w.h)
				bc.h.ServeHTTP(w, reqs[i%clients])
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing between requests
// but its (cleared) header map.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
