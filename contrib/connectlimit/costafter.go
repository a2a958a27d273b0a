package connectlimit

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/floodgate-go/floodgate"
)

// Response is how a call ended, for the cost function of WithCostAfter.
type Response struct {
	// Procedure is the call's procedure.
	Procedure string
	// Err is the handler's error (nil on success; connect.CodeOf reads
	// its code).
	Err error
	// Header and Trailer are the response's headers and trailers as the
	// handler left them (for an error, Trailer is the error's metadata).
	Header, Trailer http.Header
	// Reported is the cost the handler reported with
	// floodgate.ReportCost, or -1 if it reported none.
	Reported int
}

// WithCostAfter charges each call the cost known only once it has ended,
// as floodgate.WithCostAfter does for HTTP: the call is admitted at its
// estimate (WithCost, default 1), and charged, when its handler returns,
// the cost cost returns when it returns true; else the cost the handler
// reported with floodgate.ReportCost(ctx, n); else the estimate. The key
// may go into debt; its next calls are denied until it is paid, with a
// RetryInfo that says when. Over-spending is bounded by the calls in
// flight (see floodgate.WithCostAfter). CostReported and CostTrailer are
// ready-made cost functions. Every policy's limiter must implement
// floodgate.Charger and floodgate.Refunder.
func WithCostAfter(cost func(Response) (int, bool)) Option {
	return func(c *config) error {
		if cost == nil {
			return fmt.Errorf("%w: WithCostAfter: nil cost function (CostReported takes the handler's ReportCost)", floodgate.ErrInvalidOption)
		}
		c.cost = cost
		c.gate = append(c.gate, floodgate.WithSettledCost())
		return c.once("WithCostAfter")
	}
}

// CostReported is the cost function of WithCostAfter that charges what
// the handler reported with floodgate.ReportCost, and the estimate if it
// reported nothing.
func CostReported(resp Response) (int, bool) {
	return resp.Reported, resp.Reported >= 0
}

// CostTrailer returns a cost function for WithCostAfter that charges the
// value of the response trailer name (or, failing that, of the header
// name) the handler set: a non-negative integer. A missing or malformed
// value charges what the handler reported with floodgate.ReportCost, or
// else the estimate. The value reaches the client as it is. name must
// not be empty; the error wraps floodgate.ErrInvalidOption otherwise.
func CostTrailer(name string) (func(Response) (int, bool), error) {
	if name == "" {
		return nil, fmt.Errorf("%w: CostTrailer: empty name", floodgate.ErrInvalidOption)
	}
	return func(resp Response) (int, bool) {
		for _, h := range []http.Header{resp.Trailer, resp.Header} {
			if n, err := strconv.Atoi(h.Get(name)); err == nil && n >= 0 {
				return n, true
			}
		}
		return CostReported(resp)
	}, nil
}
