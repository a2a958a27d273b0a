package floodgatetest

import (
	"math/big"
	"time"

	"github.com/floodgate-go/floodgate"
)

// debtCap is floodgate.DebtLimits in the units of one rate, as the
// window limiters apply them to a charge beyond the quota
// (floodgate.Charger): a charge counts at most perCall units, a sliding
// log carries at most total units ahead, and a sliding counter a debt
// at most periods windows past the current one. Each bound is at least
// the rate's Limit (a window's quota is never forgiven).
type debtCap struct {
	perCall, total int
	periods        int64
}

// maxLogDebt is the most units a sliding log carries ahead whatever its
// limits (floodgate's 32-bit running totals).
const maxLogDebt = 1 << 30

// newDebtCap returns l at rate r; zero limits are
// floodgate.DefaultDebtLimits.
func newDebtCap(l floodgate.DebtLimits, r floodgate.Rate) debtCap {
	if l == (floodgate.DebtLimits{}) {
		l = floodgate.DefaultDebtLimits
	}
	return debtCap{
		perCall: min(max(unitsIn(l.PerCall, r), r.Limit), maxCost),
		total:   min(max(unitsIn(l.Total, r), r.Limit), maxLogDebt),
		periods: max(int64(l.Total/r.Period), 1),
	}
}

// unitsIn returns the units r refills in d, rounded down, at most 2^62.
func unitsIn(d time.Duration, r floodgate.Rate) int {
	u := new(big.Int).Mul(big.NewInt(int64(d)), big.NewInt(int64(r.Limit)))
	u.Quo(u, big.NewInt(int64(r.Period)))
	if u.Cmp(big.NewInt(1<<62)) > 0 {
		return 1 << 62
	}
	return int(u.Int64())
}
