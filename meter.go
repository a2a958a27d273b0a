package floodgate

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// meterKey is the context key of a call's meter.
type meterKey struct{}

// MeterKey is the string key under which a call's context also answers
// with its meter, the one ReportCost writes to: for an adapter of a
// framework whose own context looks up string keys in a map of its own
// rather than in the request's context, as gin's *gin.Context does
// unless its engine sets ContextWithFallback. Such an adapter copies
// ctx.Value(MeterKey), when it is not nil, into that map under MeterKey
// (contrib/ginlimit does), so that ReportCost(frameworkContext, n) finds
// it.
const MeterKey = "github.com/floodgate-go/floodgate.ReportCost"

// meter is a call's context, carrying the cost its handler reports: one
// allocation for both. It keeps the meter of an enclosing metered limit,
// so that a report reaches every limit the call passed through.
type meter struct {
	context.Context
	parent *meter
	// cost is the reported cost + 1, 0 if none was reported, while the
	// call runs; once the call settles (read), -1 - that value, so that a
	// report that comes too late is refused instead of lost.
	cost atomic.Int64
}

// Value returns the meter itself for meterKey and MeterKey.
func (m *meter) Value(key any) any {
	if key == (meterKey{}) || key == MeterKey {
		return m
	}
	return m.Context.Value(key)
}

// report records n, unless the call has settled.
func (m *meter) report(n int) bool {
	for {
		v := m.cost.Load()
		if v < 0 {
			return false
		}
		if m.cost.CompareAndSwap(v, int64(n)+1) {
			return true
		}
	}
}

// read closes the meter to later reports and returns the cost reported
// before, if any. It may be called more than once.
func (m *meter) read() (int, bool) {
	for {
		v := m.cost.Load()
		if v < 0 {
			v = -1 - v
			return int(v - 1), v > 0
		}
		if m.cost.CompareAndSwap(v, -1-v) {
			return int(v - 1), v > 0
		}
	}
}

// Context returns ctx carrying the call's meter, to hand the handler so
// that it can report the call's real cost with ReportCost, when the gate
// charges the cost after the call (WithSettledCost, WithCostAfter) and
// the call was allowed; otherwise ctx itself. Call it once per call,
// before Settle: the meter is kept in out.
func (out *Outcome) Context(ctx context.Context) context.Context {
	if !out.metered {
		return ctx
	}
	if out.meter == nil {
		parent, _ := ctx.Value(meterKey{}).(*meter)
		out.meter = &meter{Context: ctx, parent: parent}
	}
	return out.meter
}

// ReportedCost returns the cost the call's handler reported with
// ReportCost, and whether it reported one. It closes the call's meter:
// a report after it is refused with an error (see ReportCost), so call
// it once the handler has returned, as Settle does.
func (out *Outcome) ReportedCost() (int, bool) {
	if out.meter == nil {
		return 0, false
	}
	return out.meter.read()
}

// ReportCost reports the real cost of the call whose context ctx is (or
// derives from), for limits that charge the cost known after the
// response (WithCostAfter; grpclimit's and connectlimit's too): the call
// is charged n instead of its estimate when it settles. A later report
// replaces an earlier one. A cost above 2^24 counts as 2^24 (and the
// limiter bounds what a key owes: see WithMaxDebt). ctx may also be a
// gin *gin.Context under contrib/ginlimit (see MeterKey).
//
// It returns an error wrapping ErrInvalidCost for a negative n, and one
// wrapping ErrInvalidOption when no such limit is in front of the call
// or the call has settled already (its handler returned before the
// report: a goroutine that outlived it): the report would not be
// charged, and the call is charged its estimate. Since an ignored error
// would hide that, each of the two is also logged once per process at
// WARN, with slog.Default.
func ReportCost(ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: ReportCost(%d) is negative", ErrInvalidCost, n)
	}
	m, _ := ctx.Value(meterKey{}).(*meter)
	if m == nil {
		m, _ = ctx.Value(MeterKey).(*meter)
	}
	if m == nil {
		err := fmt.Errorf("%w: ReportCost: no limit in front of this call charges the cost after the response (WithCostAfter); "+
			"the call is charged its estimate", ErrInvalidOption)
		warnReportOnce(ctx, &reportWarned.unmetered, err)
		return err
	}
	if !m.report(min(n, maxLimit)) {
		err := fmt.Errorf("%w: ReportCost: the call has settled (its handler had returned); the report is not charged, the call was charged what it reported before or its estimate", ErrInvalidOption)
		warnReportOnce(ctx, &reportWarned.late, err)
		return err
	}
	for p := m.parent; p != nil; p = p.parent {
		p.report(min(n, maxLimit))
	}
	return nil
}

// reportWarned records which of ReportCost's failures were logged.
var reportWarned struct{ unmetered, late atomic.Bool }

// warnReportOnce logs err at WARN the first time flag is set.
func warnReportOnce(ctx context.Context, flag *atomic.Bool, err error) {
	if flag.CompareAndSwap(false, true) {
		slog.Default().LogAttrs(ctx, slog.LevelWarn, "floodgate: a cost report is lost (logged once per process)", slog.String("error", err.Error()))
	}
}
