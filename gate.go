package floodgate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/pace"
)

// Gate is the admission core: the one step that decides a call, whatever
// its transport, and the one that settles it after the handler. An
// adapter (the net/http middleware, ginlimit, a gRPC or connect
// interceptor) keys the call with its SelectorFor, hands the Call to
// Admit, and translates the Outcome into its transport's answer; after
// the handler, if the Outcome says NeedsSettle, it reports what became of
// the call to Settle. Everything else lives here, once: the error policy
// (fail closed, fail open, dry run), the list of errors that are the
// client's own doing, a client that hung up, the paced log lines, the
// decision hook and the sampling of live evictions.
//
// A Gate is built by NewGate (or inside NewMiddleware and its siblings),
// is safe for concurrent use, and allocates nothing per call on its own.
type Gate struct {
	cfg      gateConfig
	policies []*policy
	logs     gateLogs
	// debtCapLogged: a charge capped by the key's debt limits was logged
	// (see logDebtCapped).
	debtCapLogged atomic.Bool
}

// gateConfig is the transport-neutral part of the options: what the
// admission core needs.
type gateConfig struct {
	cost     int
	failOpen bool
	dryRun   bool
	headers  HeaderStyle
	logger   *slog.Logger
	logKeys  int
	hook     func(DecisionEvent)
	// settle: an allowed call's cost is reserved, and given back at
	// settlement if the call turns out not to count (WithCountStatus,
	// WithRefundUncounted).
	settle bool
	// priced: the adapter prices calls itself (WithCostFunc), so WithCost's
	// capacity check does not apply.
	priced bool
	// costAfter: each call's real cost is charged at settlement, its
	// reserved cost being an estimate (WithSettledCost, WithCostAfter).
	costAfter bool
	// wait: denied calls wait for their turn within these bounds
	// (WithWait); nil: they are refused at once.
	wait *waiting
	// stats: the gate reports to it once built (WithGateStats).
	stats *GateStats
	now   func() time.Time
}

// NewGate returns the admission core for the policies of sel, for an
// adapter of a transport whose calls are of type C. It takes the options
// of the admission core — WithCost, WithFailOpen, WithDryRun, WithHeaders,
// WithLogger, WithLogKeys, WithDecisionHook, WithRefundUncounted,
// WithWallClock, WithGateStats — and refuses, with an error wrapping
// ErrInvalidOption, those of the net/http middleware (key and cost functions, WithSkip,
// WithOnly, the denied and error handlers, WithCountStatus,
// WithLimitPreflights, WithPolicyName), which an adapter replaces with its
// transport's own. Options that no call could satisfy are refused too: a
// WithCost above a policy's limiter's Capacity, WithRefundUncounted on a
// limiter that cannot refund.
func NewGate[C any](sel *SelectorFor[C], opts ...MiddlewareOption) (*Gate, error) {
	if sel == nil {
		return nil, fmt.Errorf("%w: nil selector", ErrInvalidOption)
	}
	c, err := newMiddlewareConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := c.gateOnly(); err != nil {
		return nil, err
	}
	return newGate(c.gateConfig, sel.policies)
}

func newGate(c gateConfig, policies []*policy) (*Gate, error) {
	for _, p := range policies {
		if err := checkCapacity(p.Name, p.Limiter, c.cost); err != nil && !c.priced {
			return nil, err
		}
		if _, ok := p.Limiter.(Refunder); c.settle && !ok {
			return nil, fmt.Errorf("policy %q: %w: counting only some outcomes (WithCountStatus, WithRefundUncounted) needs a limiter that implements Refunder, to give back the cost of a call that does not count", p.Name, ErrInvalidOption)
		}
		if err := checkKinds(c, p); err != nil {
			return nil, err
		}
	}
	if c.wait != nil {
		c.wait = c.wait.clone() // each gate counts its own waiters
	}
	g := &Gate{cfg: c, policies: policies}
	if c.logger != nil {
		g.logs.denials = pace.NewKeys(c.logKeys)
	}
	if c.stats != nil {
		c.stats.add(g)
	}
	return g, nil
}

// Call is what a transport knows about one call before the limit
// decides: the policy and key its selector found (or why none could be
// found), the cost, and where the call goes, for the log lines and the
// hook. An adapter gets it from SelectorFor.Call (the net/http middleware
// from its PolicySelector) and fills in the rest; it is passed by value
// and holds nothing of a transport but an optional *http.Request.
type Call struct {
	// Key is the key the call is counted under; empty when Err is set.
	Key string
	// Err is why the call could not be keyed or priced: a key function's
	// error, or the adapter's cost function's. Admit then refuses the
	// call without asking the limiter, whatever the error policy (dry-run
	// aside): a client error, a misconfiguration, or OutcomeKeyFailed.
	Err error
	// Cost is the units the call costs. 0 stands for the gate's cost
	// (WithCost, default 1), so that no call is free by omission; an
	// adapter that prices a call at nothing sets Free. A negative cost
	// is a misconfiguration (an error wrapping ErrInvalidOption and
	// ErrInvalidCost).
	Cost int
	// Free makes the call cost nothing: it is decided with n = 0, which
	// reports the quota without consuming, and always allowed.
	Free bool
	// Method and Path say where the call goes, in the log lines: for
	// gRPC, say, "POST" and the full method. Left empty, they are
	// Request's method and URL path.
	Method, Path string
	// Request is the HTTP request, shown to the decision hook as
	// DecisionEvent.Request; nil for calls of other transports.
	Request *http.Request

	policy *policy // set by the selector
	// refundable: the call's cost is reserved until Settle, which gives
	// it back if the call turns out not to count, when the policy's
	// limiter can refund (the middleware's CORS preflights).
	refundable bool
}

// Policy returns the name of the policy the call was keyed by, or would
// have been (see SelectorFor.Call); empty for a Call not made by a
// selector.
func (c Call) Policy() string {
	if c.policy == nil {
		return ""
	}
	return c.policy.Name
}

// OutcomeKind says what became of a call at the limit.
type OutcomeKind uint8

// The kinds of Outcome.
const (
	// OutcomeAllowed: the limiter allowed the call.
	OutcomeAllowed OutcomeKind = iota
	// OutcomeDenied: the limiter denied the call. Outcome.Err wraps
	// ErrCostExceedsLimit when the call can never be allowed (waiting
	// does not help: Decision.RetryAfter is 0 and no Retry-After is
	// sent). Decision.Overloaded marks the denial of a service-wide
	// capacity rather than of the client's own limit: HTTP answers 503,
	// gRPC and connect Unavailable, each with the wait.
	OutcomeDenied
	// OutcomeClientError: the call could not be keyed for its client's
	// own doing (ErrNoKey, ErrNoClientIP, ErrKeyTooLong, ErrInvalidBody,
	// ErrAmbiguousKey):
	// refused under every error policy but dry-run. HTTP answers 400 (413
	// for a body over a key function's bound); gRPC InvalidArgument.
	OutcomeClientError
	// OutcomeMisconfigured: a key function reported a misconfiguration
	// (ErrInvalidOption): refused under every error policy but dry-run,
	// and logged for the operator. HTTP answers 500; gRPC Internal.
	OutcomeMisconfigured
	// OutcomeFailed: the limiter or its store failed. The error policy
	// decides: refused (fail closed, the default; HTTP 503, gRPC
	// Unavailable) or let through (WithFailOpen, WithDryRun). Only the
	// limiter's own errors are of this kind; see OutcomeKeyFailed.
	OutcomeFailed
	// OutcomeHungUp: the client went away while the call was being
	// decided, and no decision was made. Always refused, under every
	// policy: nobody is left to serve. Nothing needs to be sent (HTTP
	// logs it as 499, StatusClientClosedRequest).
	OutcomeHungUp
	// OutcomeKeyFailed: keying or pricing the call failed with an error
	// of its own — a custom key function's lookup that failed, a cost
	// function that cannot parse the body — that is neither a client
	// error above nor a misconfiguration. No limiter was asked, so there
	// is no failure of the limit for the error policy to forgive:
	// refused under every error policy but dry-run, fail-open included,
	// since a client that can make keying fail would otherwise pass
	// uncounted on demand. HTTP answers 503, as ErrorStatus does for an
	// error it does not know; gRPC Unavailable. A key or cost function
	// that means the client's fault wraps ErrInvalidBody (400) instead.
	OutcomeKeyFailed
)

var outcomeKindNames = [...]string{"allowed", "denied", "client error", "misconfigured", "limiter failed", "hung up", "key failed"}

// String returns the kind's name, e.g. "denied".
func (k OutcomeKind) String() string {
	if int(k) < len(outcomeKindNames) {
		return outcomeKindNames[k]
	}
	return fmt.Sprintf("OutcomeKind(%d)", k)
}

// Outcome is what Admit decided for a call, as a value: the adapter acts
// on it and writes it in its transport's terms, and hands it back to
// Settle after the handler when NeedsSettle is set.
//
// If Blocked, the handler must not run: the adapter answers a denial
// (Kind OutcomeDenied) with the Quota values and Decision.RetryAfter, a
// hang-up with nothing, and the other kinds with its transport's error
// for them — or with its user's error handler, if it offers one (the
// middleware's WithErrorHandler): a custom error policy is the adapter's
// answer to a blocked error, never a way to let one through. Otherwise
// the handler runs, with the Quota values sent along (none for an error
// let through by the error policy).
type Outcome struct {
	// Call is the call as admitted: its Key and Policy, where it went,
	// and its Cost as charged (the gate's cost applied; 0 when no
	// decision was asked for).
	Call Call
	// Kind is what happened.
	Kind OutcomeKind
	// Blocked reports that the call is refused: a denial outside
	// dry-run, an error outside fail-open's and dry-run's reach, a
	// hang-up.
	Blocked bool
	// NeedsSettle reports that the adapter must call Settle once the
	// handler is done, also when it panics: the call's cost is reserved
	// until then (WithCountStatus, WithRefundUncounted), its real cost is
	// charged then (WithSettledCost, WithCostAfter), or it holds slots of
	// an in-flight limit (a limiter that implements Releaser) until then.
	NeedsSettle bool
	// Decision is the limiter's decision; zero when it failed.
	Decision Decision
	// Err is why no decision could be made (Kind other than allowed and
	// denied; for OutcomeHungUp it also wraps the context's error), or
	// ErrCostExceedsLimit for a denial waiting cannot cure.
	Err error
	// Quota holds the quota values to send, per WithHeaders: on allowed
	// and denied calls; Retry-After only on a blocked denial that waiting
	// cures.
	Quota Quota
	// Waited is how long Admit held the call for its turn (WithWait); 0
	// for a call decided at once.
	Waited time.Duration

	// What Settle needs beyond the call: when the call's slots were
	// taken (a policy whose limiter holds slots: Releaser), in Unix ns,
	// and the meter its handler reports its cost to (WithSettledCost).
	start   int64
	metered bool
	meter   *meter
}

// Admit decides a call: it asks the policy's limiter for the call's cost
// under its key, with ctx (the call's context), applies the error policy
// to whatever went wrong, logs, calls the decision hook, and returns the
// Outcome. It writes nothing anywhere: answering is the adapter's. Under
// WithWait it books the call's units and holds the call until its turn
// (Outcome.Waited), or returns a denial at once when the turn is too far,
// too many calls wait, or ctx's deadline comes first; a call whose ctx is
// done while it waits gives its turn back and is OutcomeHungUp.
func (g *Gate) Admit(ctx context.Context, c Call) (out Outcome) {
	out.Call = c
	g.admit(ctx, &out)
	return out
}

// admit is Admit in place, on out.Call: the middleware's hot path builds
// its Call inside its Outcome, since copying these structs in and out
// would cost as much as the rest of the step.
func (g *Gate) admit(ctx context.Context, out *Outcome) {
	c := &out.Call
	err := c.Err
	if c.policy == nil {
		err = fmt.Errorf("%w: a Call must come from a selector's Call method", ErrInvalidOption)
		c.policy = &policy{}
	}
	switch {
	case err != nil:
	case c.Free && g.cfg.costAfter:
		// An estimate of nothing still needs a unit in hand, so that a
		// key in debt waits; settlement gives it back if the call cost
		// nothing.
		c.Cost = 1
	case c.Free:
		c.Cost = 0
	case c.Cost == 0:
		c.Cost = g.cfg.cost
	case c.Cost < 0:
		err = fmt.Errorf("%w: %w: the cost function returned %d", ErrInvalidOption, ErrInvalidCost, c.Cost)
	}
	if err != nil {
		out.Kind = callErrorKind(err)
		g.refuse(ctx, out, err, evictionSample{})
		return
	}
	if g.cfg.wait == nil || c.Cost == 0 {
		out.Err = c.policy.decide(ctx, &out.Decision, c.Key, c.Cost)
	} else {
		out.Err = g.reserve(ctx, out)
	}
	var evicted evictionSample
	if g.logs.denials != nil || (g.cfg.hook != nil && rand.Uint32()%hookWatchOneIn == 0) {
		evicted = g.sampleEvictions(ctx, out)
	}
	if out.Err != nil && !errors.Is(out.Err, ErrCostExceedsLimit) {
		out.Kind = errorKind(out.Err)
		g.refuse(ctx, out, out.Err, evicted)
		return
	}
	// Decided: allowed, or denied (also for a cost that can never fit).
	d := &out.Decision
	costExceeded := out.Err != nil
	if costExceeded {
		// A denial, but one that waiting does not cure: no Retry-After.
		d.Allowed, d.RetryAfter = false, 0
	}
	if d.Allowed {
		c.refundable = c.refundable && canRefund(c.policy.Limiter)
		if c.Cost > 0 && (g.cfg.settle || g.cfg.costAfter || c.policy.holds || c.refundable) {
			g.settleLater(out)
		}
	} else {
		out.Kind, out.Blocked = OutcomeDenied, !g.cfg.dryRun
	}
	// Set field by field: a literal is built in a temporary and copied
	// in 16-byte words over its byte-wide fields just written, a copy the
	// processor cannot forward from its store buffer (see policy.decide).
	var qr quotaRequest
	qr.style, qr.d, qr.now = g.cfg.headers, d, g.cfg.now
	qr.retry, qr.costExceeded, qr.debts = out.Blocked && !costExceeded, costExceeded, g.cfg.costAfter
	if g.cfg.headers.ietf() {
		qr.rate = c.policy.rateOf(c.Key)
	}
	c.policy.quota(&qr, &out.Quota)
	if !d.Allowed && g.logs.denials != nil {
		g.logDenial(ctx, out)
	}
	if g.cfg.hook != nil {
		g.cfg.hook(out.event(evicted))
	}
}

// refuse completes the outcome of a call on which no decision could be
// made, of the kind out.Kind its caller sorted err into. Only a failure
// of the limiter is the error policy's to decide; the client's own
// doing, a misconfiguration, a key or cost function's own error and a
// client that went away are refused under every policy (dry-run aside,
// which lets everything through but the last).
func (g *Gate) refuse(ctx context.Context, out *Outcome, err error, evicted evictionSample) {
	out.Err, out.Blocked, out.Call.Cost = err, true, 0
	switch {
	case ctx.Err() != nil:
		// The client went away, and the limiter most likely failed
		// because of it: that is no outage, and nobody is left to serve.
		out.Kind = OutcomeHungUp
		out.Err = fmt.Errorf("floodgate: the client went away during the decision: %w; %w", ctx.Err(), err)
		g.logClient(ctx, out)
	case out.Kind == OutcomeFailed:
		out.Blocked = !g.cfg.dryRun && !g.cfg.failOpen
		g.logError(ctx, out, err)
	case out.Kind == OutcomeMisconfigured:
		out.Blocked = !g.cfg.dryRun
		g.logMisconfig(ctx, out)
	case out.Kind == OutcomeKeyFailed:
		out.Blocked = !g.cfg.dryRun
		g.logError(ctx, out, err)
	default:
		out.Blocked = !g.cfg.dryRun
		g.logClient(ctx, out)
	}
	if g.cfg.hook != nil {
		g.cfg.hook(out.event(evicted))
	}
}

// errorKind sorts an error of the limiter on which no decision could be
// made: the client's own doing, a misconfiguration, or a failure of the
// limiter (everything else: the client can only wait it out). This list
// and callErrorKind are the one place that says what a client may be
// refused for under fail-open.
func errorKind(err error) OutcomeKind {
	switch {
	case errors.Is(err, ErrInvalidOption):
		return OutcomeMisconfigured
	case errors.Is(err, ErrInvalidBody), errors.Is(err, ErrNoKey), errors.Is(err, ErrNoClientIP), errors.Is(err, ErrKeyTooLong),
		errors.Is(err, ErrAmbiguousKey), errors.Is(err, ErrNoPlan):
		// ErrNoPlan: a key the plan resolver does not know (a made-up API
		// key) is the client's, never an outage that fail-open forgives.
		return OutcomeClientError
	}
	return OutcomeFailed
}

// callErrorKind sorts an error of keying or pricing a call, as
// errorKind does, except that no such error is a failure of the limiter:
// fail-open forgives only the limiter's own, never one that a request can
// provoke before the limiter is asked.
func callErrorKind(err error) OutcomeKind {
	if k := errorKind(err); k != OutcomeFailed {
		return k
	}
	return OutcomeKeyFailed
}

// event is the DecisionEvent of an outcome.
func (out *Outcome) event(s evictionSample) DecisionEvent {
	c := &out.Call
	return DecisionEvent{Request: c.Request, Policy: c.policy.Name, Key: c.Key, Cost: c.Cost,
		Decision: out.Decision, Err: out.Err, Blocked: out.Blocked, EvictedLive: s.evicted, DebtsLost: s.lost, Waited: out.Waited}
}

// sampleEvictions looks, at most once a second, at the live evictions and
// the lost debts of the policy's limiter, and logs them.
func (g *Gate) sampleEvictions(ctx context.Context, out *Outcome) evictionSample {
	p := out.Call.policy
	s := p.evictions.sample(g.cfg.now().UnixNano())
	if s != (evictionSample{}) && g.cfg.logger != nil {
		g.logEvictions(ctx, p, s)
	}
	return s
}

// DecisionEvent describes one decision of the admission core, for metrics
// and audit, whichever adapter made the call. It is passed by value to
// the WithDecisionHook function.
type DecisionEvent struct {
	// Request is the HTTP request decided on; nil for a call of another
	// transport (gRPC, connect).
	Request *http.Request
	// Policy is the name of the policy that decided. On a key error it is
	// the policy whose key function failed, or, when no policy applied
	// (ErrNoKey), the last one tried.
	Policy string
	// Key is the key the request was counted under; empty if none could
	// be formed.
	Key string
	// Cost is the number of units asked for.
	Cost int
	// Decision is the limiter's decision. With WithCountStatus, the first
	// event of an allowed request reports the reservation made before the
	// handler ran (its cost consumed).
	Decision Decision
	// Err is non-nil when no decision could be made (the error policy then
	// applied; ErrorStatus tells the client's doing from a failure) and is
	// ErrCostExceedsLimit when the request can never be allowed. When the
	// client went away during the decision, Err also wraps the request
	// context's error (context.Canceled, or context.DeadlineExceeded).
	Err error
	// Blocked reports that the request was refused and the handler not
	// called: a denial outside dry-run, an error outside fail-open's and
	// dry-run's reach, or a client that went away.
	Blocked bool
	// AfterHandler marks the second event of a call whose charge
	// settlement changed: under WithCountStatus, the handler's status did
	// not count, so its cost (Cost) was given back; under WithCostAfter,
	// the real cost differed from the estimate, so the difference was
	// given back (Cost) or charged (Charged). Err reports a correction
	// that failed (a refund that fails leaves the cost consumed). Decision
	// is zero in this event.
	AfterHandler bool
	// Charged is, in an AfterHandler event, the units charged beyond the
	// estimate because the call's real cost was higher (WithCostAfter):
	// the key may be in debt for them.
	Charged int
	// DebtCapped reports, in an AfterHandler event, that the charge took
	// the key to the most it may owe (the limiter's WithMaxDebt): it was
	// charged up to that bound, and the rest of Charged forgiven. It is
	// not an error (Err is nil unless something else failed); the metrics
	// adapters count it, and the gate logs the first at WARN.
	DebtCapped bool
	// Waited is how long the call was held for its turn before it was
	// allowed (WithWait).
	Waited time.Duration
	// EvictedLive is, when this decision sampled its limiter's Stats (at
	// most once a second; with a logger on the first request after that
	// second, with a hook alone on one request in 64 picked at random),
	// how many live limits the limiter's store evicted since the previous
	// sample: non-zero means the store is too small (WithMaxKeys) or under
	// a key spray. Each such eviction either went to the store's debt
	// memory, where it may limit fresh keys that share its slot, or, under
	// WithForgetEvicted, reset a client's limit.
	EvictedLive uint64
	// DebtsLost is, in the same sample, how many of those debts found no
	// entry of their own in the store's debt memory (Stats().Merged +
	// Stats().Forgotten grew): merged into a bound shared with other keys,
	// so that fresh keys hashing there start limited, or, under
	// WithForgetOverflow or WithForgetEvicted, forgotten. Non-zero means
	// a key spray beyond the size the debt memory is built for
	// (WithDebtMemory, WithMaxKeys).
	DebtsLost uint64
}
