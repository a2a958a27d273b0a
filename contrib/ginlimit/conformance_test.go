package ginlimit_test

import (
	"net/http/httptest"
	"testing"

	"github.com/floodgate-go/floodgate/contrib/ginlimit"
	"github.com/floodgate-go/floodgate/internal/conformance"
	"github.com/gin-gonic/gin"
)

// ginDriver serves the conformance cases behind ginlimit, in a gin
// engine without gin.Recovery (a panic breaks the connection off, as in
// net/http), on a real server.
type ginDriver struct{}

func (ginDriver) Name() string { return "gin" }

func (ginDriver) Start(t *testing.T, s conformance.Setup) conformance.Client {
	limit, err := ginlimit.New(s.Limiter, conformance.HTTPOptions(s)...)
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.POST("/call", limit, func(c *gin.Context) { conformance.HTTPAct(c.Writer, c.Request, s.Ran) })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return conformance.HTTPClient{URL: srv.URL + "/call", Client: srv.Client()}
}

// TestConformance runs the outcome cases every transport passes alike
// (internal/conformance) through ginlimit.
func TestConformance(t *testing.T) { conformance.Run(t, ginDriver{}) }
