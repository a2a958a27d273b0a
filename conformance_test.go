package floodgate_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/conformance"
)

// httpDriver serves the conformance cases behind the net/http middleware,
// on a real server.
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

// TestConformance runs the outcome cases every transport passes alike
// (internal/conformance) through the net/http middleware.
func TestConformance(t *testing.T) { conformance.Run(t, httpDriver{}) }
