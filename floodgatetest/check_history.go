package floodgatetest

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
)

// effKind is what a recorded call did to the limiter.
type effKind uint8

const (
	effAllow   effKind = iota + 1 // AllowN, or an admission without waiting
	effReserve                    // ReserveN, or an admission that may wait
	effRefund                     // RefundN
	effCharge                     // ChargeN
	effRelease                    // ReleaseN
	effReset                      // Reset
	effSetRate                    // SetRate
	effSetPlan                    // the resolver's answer changed
)

func (k effKind) String() string {
	return [...]string{"?", "allow", "reserve", "refund", "charge", "release", "reset", "setRate", "setPlan"}[k]
}

// retUnknown is the return of a call whose outcome is unknown (it failed
// after it may have reached the store): it may take effect at any time
// after its call, or never.
const retUnknown = math.MaxInt

// crec is one call of the history.
type crec struct {
	id     int
	eff    effKind
	op     Op
	key    string
	inst   int
	worker int
	// n is the cost (allow, reserve) or the units given back, charged or
	// released.
	n       int
	maxWait time.Duration
	rc      floodgate.RateChange // setRate
	// inv and ret order the call and its return among all the history's
	// events; t0 and t1 are the clock (since epoch) at them, r0 and r1
	// the real time since the run began.
	inv, ret int
	t0, t1   time.Duration
	r0, r1   time.Duration
	// The outcome.
	d        floodgate.Decision
	wait     time.Duration
	err      error
	unknown  bool // failed after it may have taken effect
	noEffect bool // failed saying that it changed nothing
	gated    bool // through the admission core
	blocked  bool // the admission core refused it
	hungUp   bool // its client hung up while it waited
	call     *crec
}

// setErr notes the call's error and what it says about its effect.
func (rec *crec) setErr(err error) {
	rec.err = err
	switch {
	case err == nil:
	case noEffect(err):
		rec.noEffect = true
	default:
		rec.unknown = true
		rec.ret = retUnknown
	}
}

func (rec *crec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d w%d", rec.id, rec.worker)
	if rec.inst > 0 {
		fmt.Fprintf(&b, " i%d", rec.inst)
	}
	ret := "?"
	if rec.ret != retUnknown {
		ret = fmt.Sprint(rec.ret)
	}
	fmt.Fprintf(&b, " [%d..%s] t=%v", rec.inv, ret, rec.t0)
	if rec.t1 != rec.t0 && rec.ret != retUnknown {
		fmt.Fprintf(&b, "..%v", rec.t1)
	}
	b.WriteString(": ")
	switch rec.eff {
	case effAllow:
		fmt.Fprintf(&b, "AllowN(%s, %d) = %s", rec.key, rec.n, decisionString(rec.d))
	case effReserve:
		fmt.Fprintf(&b, "ReserveN(%s, %d, %v) = %s wait=%v", rec.key, rec.n, rec.maxWait, decisionString(rec.d), rec.wait)
	case effRefund:
		fmt.Fprintf(&b, "RefundN(%s, %d)", rec.key, rec.n)
	case effCharge:
		fmt.Fprintf(&b, "ChargeN(%s, %d)", rec.key, rec.n)
	case effRelease:
		fmt.Fprintf(&b, "ReleaseN(%s, %d)", rec.key, rec.n)
	case effReset:
		fmt.Fprintf(&b, "Reset(%s)", rec.key)
	case effSetRate:
		fmt.Fprintf(&b, "SetRate(%v burst %d, %v)", rec.rc.Rate, rec.rc.Burst, rec.rc.Inherit)
	case effSetPlan:
		fmt.Fprintf(&b, "plan of %s is now #%d", rec.key, rec.op.Plan)
	}
	if rec.gated {
		b.WriteString(" via the gate")
		if rec.blocked {
			b.WriteString(", blocked")
		} else if rec.eff == effAllow || rec.eff == effReserve {
			b.WriteString(", let through")
		}
	}
	if rec.hungUp {
		b.WriteString(", hung up while waiting")
	}
	if rec.call != nil {
		fmt.Fprintf(&b, " (settles #%d)", rec.call.id)
	}
	if rec.err != nil {
		fmt.Fprintf(&b, " err=%v", rec.err)
	}
	return b.String()
}

func decisionString(d floodgate.Decision) string {
	s := "denied"
	if d.Allowed {
		s = "allowed"
	}
	s += fmt.Sprintf(" limit=%d remaining=%d", d.Limit, d.Remaining)
	if d.RetryAfter != 0 {
		s += fmt.Sprintf(" retry=%v", d.RetryAfter)
	}
	if d.ResetAfter != 0 {
		s += fmt.Sprintf(" reset=%v", d.ResetAfter)
	}
	if d.Overloaded {
		s += " overloaded"
	}
	return s
}

// history is the record of a run's calls, in the order their calls and
// returns happened.
type history struct {
	mu   sync.Mutex
	seq  int
	recs []*crec
}

// begin records the call of op, which has effect eff on key.
func (h *history) begin(r *run, w *worker, op Op, eff effKind, key string) *crec {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	rec := &crec{id: len(h.recs), eff: eff, op: op, key: key, inst: op.Instance, worker: w.id,
		inv: h.seq, t0: r.clock.Now().Sub(epoch), r0: r.real()}
	h.recs = append(h.recs, rec)
	return rec
}

// beginAt is begin for a call that began at an earlier mark seq, when the
// clock read t0.
func (h *history) beginAt(r *run, w *worker, op Op, eff effKind, key string, seq int, t0 time.Duration) *crec {
	rec := h.begin(r, w, op, eff, key)
	h.mu.Lock()
	rec.inv, rec.t0 = seq, t0
	h.mu.Unlock()
	return rec
}

// end records the return of rec, then lets fill note its outcome (and
// move its return, for a call that returned long after it took effect).
func (h *history) end(r *run, rec *crec, fill func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	rec.ret, rec.t1, rec.r1 = h.seq, r.clock.Now().Sub(epoch), r.real()
	if fill != nil {
		fill()
	}
}

// mark returns a sequence number between the events before and after it.
func (h *history) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq
}

// records returns the history.
func (h *history) records() []*crec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.recs
}
