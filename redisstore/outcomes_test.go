package redisstore_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// httpDriver serves the outcome cases of every transport
// (internal/conformance) behind the net/http middleware, on a real
// server; the other transports run the same table on in-memory limiters,
// which the Redis ones match decision for decision.
type httpDriver struct{}

func (httpDriver) Name() string { return "net/http" }

func (httpDriver) Start(t *testing.T, s conformance.Setup) conformance.Client {
	mw, err := floodgate.NewMiddleware(s.Limiter, conformance.HTTPOptions(s)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conformance.HTTPAct(w, r, s.Ran)
	})))
	t.Cleanup(srv.Close)
	return conformance.HTTPClient{URL: srv.URL, Client: srv.Client()}
}

// TestOutcomesOnRedis runs the admission core's outcome table — allowed,
// denied, errors, hang-ups, counting only failures, in-flight slots, the
// cost after the response, waiting for a turn — with Redis limiters, on
// both clients.
func TestOutcomesOnRedis(t *testing.T) {
	addr := redistest.Shared(t)
	for _, c := range clients(t, addr) {
		store := conformance.Store{
			Name: "redis/" + c.name,
			Bucket: func(limit int) floodgate.Limiter {
				b, err := redisstore.NewTokenBucket(c.s, floodgate.Rate{Limit: limit, Period: time.Hour}, patient,
					redisstore.WithPrefix(prefix(t)), redisstore.WithClock(func() time.Time { return conformance.T0 }))
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			InFlight: func(n int, serviceWide bool) floodgate.Limiter {
				build := redisstore.NewInFlight
				if serviceWide {
					build = redisstore.NewServiceInFlight
				}
				l, err := build(c.s, n, patient, redisstore.WithPrefix(prefix(t)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				return l
			},
		}
		t.Run(store.Name, func(t *testing.T) { conformance.RunStore(t, httpDriver{}, store) })
	}
}
