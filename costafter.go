package floodgate

import (
	"fmt"
	"net/http"
	"strconv"
)

// Response is how a request was answered, for the cost function of
// WithCostAfter.
type Response struct {
	// Request is the request, as the handler got it.
	Request *http.Request
	// Status is the status sent (200 if the handler wrote none).
	Status int
	// Header is the response header as the handler left it, trailers
	// included (under their names, or http.TrailerPrefix + name).
	Header http.Header
	// Bytes is the size of the body written.
	Bytes int64
	// Reported is the cost the handler reported with ReportCost, or -1
	// if it reported none.
	Reported int
}

// WithCostAfter charges each request the cost known only once it has
// been answered — the bytes it sent, the rows it returned, the tokens a
// language model spent — instead of a cost fixed up front. Before the
// handler, the request is admitted at its estimate (WithCost or
// WithCostFunc, at least 1: a key in debt waits even for a request that
// may cost nothing), which is reserved. After it, the request is charged
// the cost cost returns when it returns true; else the cost the handler
// reported with ReportCost(r.Context(), n); else the estimate stands. The
// difference is given back (Refunder) or charged beyond the quota
// (Charger): the key may go into debt, as with Bucket4j's overdraft, and
// its next requests are denied until it is paid, with a Retry-After and
// RateLimit fields that say when (RateLimit's t may then exceed the
// window w: the debt is the truth; remaining is never negative).
// CostReported, CostBytes and CostHeader are ready-made cost functions.
//
// Over-spending is bounded by what was in flight: every request needs its
// estimate in hand to start, so when the quota runs out, the key has
// over-spent at most the real costs of the requests then running, less
// their estimates — never more, however many more come. With a quota of
// 10, an estimate of 1 and 10 concurrent requests each costing 5, the key
// owes 40 once they are done, and waits for 41 units before the next one.
// Every algorithm pays that debt at its rate, a window limiter carrying
// it into the coming windows (see Charger), so a client whose calls
// always cost more than it announces gets the limit per Period over any
// run, plus that one over-spend. A debt is bounded too (WithMaxDebt on
// the limiter: an hour per call and a day in all by default); a charge
// beyond it is reported in the call's AfterHandler DecisionEvent
// (DebtCapped). A handler that panics is charged at least its estimate.
//
// Every policy's limiter must implement Charger and Refunder (TokenBucket,
// SlidingLog, SlidingCounter and All of them do, in memory and on Redis);
// NewMiddleware refuses the option otherwise. The handler sees a wrapped
// ResponseWriter, as under WithCountStatus, and a request whose context
// carries the meter ReportCost writes to. It may be combined with
// WithCountStatus: a request that does not count costs nothing.
func WithCostAfter(cost func(Response) (int, bool)) MiddlewareOption {
	return func(c *middlewareConfig) error {
		if cost == nil {
			return fmt.Errorf("%w: WithCostAfter: nil cost function (CostReported takes the handler's ReportCost)", ErrInvalidOption)
		}
		c.responseCost, c.costAfter = cost, true
		c.given["WithCostAfter"] = true
		return c.once("cost after")
	}
}

// CostReported is the cost function of WithCostAfter that charges what
// the handler reported with ReportCost, and the estimate if it reported
// nothing.
func CostReported(resp Response) (int, bool) {
	return resp.Reported, resp.Reported >= 0
}

// CostBytes returns a cost function for WithCostAfter that charges one
// unit per unit bytes of response body, rounded up (a limit on the bytes
// a client downloads, counted in KiB with unit 1024, say; a body of 0
// bytes costs nothing). unit must be positive; the error wraps
// ErrInvalidOption otherwise.
func CostBytes(unit int64) (func(Response) (int, bool), error) {
	if unit <= 0 {
		return nil, fmt.Errorf("%w: CostBytes: unit %d must be positive", ErrInvalidOption, unit)
	}
	return func(resp Response) (int, bool) {
		n := resp.Bytes / unit
		if resp.Bytes%unit != 0 {
			n++
		}
		return int(min(n, maxLimit)), true
	}, nil
}

// CostHeader returns a cost function for WithCostAfter that charges the
// value of the response header name — or of the trailer of that name —
// as the handler (or the backend it proxies) set it: a non-negative
// integer. A missing or malformed value charges what the handler
// reported with ReportCost, or else the estimate. The header is sent to
// the client as it is; delete it in the handler after writing, or use
// ReportCost, if the client must not see it. name must not be empty; the
// error wraps ErrInvalidOption otherwise.
func CostHeader(name string) (func(Response) (int, bool), error) {
	if name == "" {
		return nil, fmt.Errorf("%w: CostHeader: empty header name", ErrInvalidOption)
	}
	name = http.CanonicalHeaderKey(name)
	trailer := http.TrailerPrefix + name
	return func(resp Response) (int, bool) {
		v := resp.Header.Get(name)
		if v == "" {
			v = resp.Header.Get(trailer)
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			return n, true
		}
		return CostReported(resp)
	}, nil
}
