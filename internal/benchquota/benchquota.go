// Package benchquota holds the two quotas every adapter benchmark runs
// (issue 31), so that each measures what a service pays as well as the
// best case:
//
//   - steady: 2^24 a second, refilled faster than any benchmark takes
//     it, so that every call sees the same remaining count and reset —
//     the one case where a table of formatted values always hits;
//   - draining: 2^24 per 30 days per client, which the calls spend: the
//     bucket gives back about 6 units a second, so the remaining count
//     changes on every call (and the reset every few calls), as it does
//     for a real client of a real quota.
//
// The docs quote the draining figures. It is no part of the library.
package benchquota

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// Quota is a named rate.
type Quota struct {
	Name string
	Rate floodgate.Rate
}

// Quotas are the steady and the draining quota, in that order.
var Quotas = []Quota{
	{"steady", floodgate.PerSecond(1 << 24)},
	{"draining", floodgate.Rate{Limit: 1 << 24, Period: 30 * 24 * time.Hour}},
}
