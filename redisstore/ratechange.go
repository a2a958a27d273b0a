package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/inherit"
)

// A change of rate on Redis. Every instance must decide under the same
// rate once a change is made, and a key's state must be converted once,
// as the change's strategy says. So the rate is kept in Redis, in one
// record per limiter (its prefix and algorithm), p:rate:tb, p:rate:tbi,
// p:rate:log or p:rate:sc:
//
//	v L P B how tc iL iP iB #id
//
// v is the version, 1 at the first change and one more at each; L, P (in
// microseconds) and B the rate and burst; how the strategy of the change
// and tc its time (on the limiter's clock, like every time here); iL, iP
// and iB the rate the states written before the first change are in; id
// the number the SetRate call that made the version drew, so that the
// call, sent again after its reply was lost, finds its own write instead
// of making a second version. id is written in base 26 in the letters
// a-z: a release that reads the nine numbers alone reads the record too.
//
// How a change reaches every instance. SetRate writes the record (one
// atomic script: two instances changing at once get two versions, the
// later one wins), under the caller's context rather than the decision
// timeout, then waits one refresh interval (WithRateRefresh) before it
// returns. Every instance reads the record again before its
// first decision once that interval has passed since it last read it, so
// by the time SetRate returns, every instance has read the new record, or
// reads it before its next decision. The read is one round trip per
// interval per instance, not per decision.
//
// How a key is converted. Each decision passes the version the instance
// decides under, and a state written under a changed rate carries its
// version and rate. A decision that meets a state of an older version
// (its key not decided since the change) has it converted, as of the
// change's time, from the rate the state carries to the current one:
// the script replies with the state, the instance converts it (with the
// same arithmetic as in memory, internal/inherit) and decides again,
// sending the state it saw and the converted one, which the script
// writes if the state is still the one seen. A charge and a booking
// convert so too, in their own scripts (chargeRated, and the booking
// through evalRated); a refund has a report (a decision of cost 0)
// convert the key first. A sliding log converts itself in its script.
// A decision that meets a state of a newer version is refused (its
// instance has not read the record yet): the instance reads it and
// decides again. So no key, once decided under the new
// rate, is ever decided under the old one again.
//
// How an emptied key keeps its version. A key's version lives in its
// state, so a state that goes away must not take it along while an
// instance may still decide under an older view: a state of a changed
// rate that would be deleted (refunded to nothing, reset, converted to
// fresh) is left as its suffix alone (a sliding log as its rate's
// member); a decision under a changed rate that finds the key empty
// leaves its version there before it decides, even if it writes nothing
// (a cost of 0); and every such state, or what is left of it, lives at
// least twice the refresh interval (rateView.minTTL), longer than any
// instance holds a view it read before the change. An emptied key reads
// as fresh under any rate.
//
// A key left alone through several changes is converted once, at its
// next decision, from the rate it was last decided under straight to the
// newest, as of the newest change (floodgatetest's
// RateChangeOnNextDecision); in memory every key is converted at every
// change.

// DefaultRateRefresh is how long an instance decides under the rate it
// last read from Redis before it reads it again, unless WithRateRefresh
// says otherwise; SetRate waits as long before it returns.
const DefaultRateRefresh = time.Second

// WithRateRefresh sets how long the limiter decides under the rate it
// last read from Redis (see SetRate) before it reads it again: one round
// trip per d per instance, made by the first decision after d has
// passed, which the decisions meanwhile wait for. SetRate waits d before
// it returns, so that every instance has read the new rate by then: give
// every instance of a limit the same d. d must be positive; the default
// is DefaultRateRefresh.
func WithRateRefresh(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: rate refresh %s must be positive", floodgate.ErrInvalidOption, d)
		}
		c.rateRefresh = d
		return c.once("WithRateRefresh")
	}
}

// rateParams is a rate as the record and the states keep it: limit,
// period in microseconds, burst (the limit for a window).
type rateParams struct {
	limit, period, burst int64
}

// rateRecord is the record (see above); v == 0: none in Redis, the rate
// the limiter was built with.
type rateRecord struct {
	v       int64
	rate    rateParams
	how     floodgate.Inherit
	tc      int64
	initial rateParams
	id      int64 // the change that made it; 0 in records written before changes had one
}

// rateView is a record and the limiter's parameters compiled from it,
// swapped as a whole.
type rateView struct {
	rec rateRecord
	// suffix follows the numbers of every state written under rec (see
	// prelude_rate.lua), and planSuffix those a plan's decision writes
	// (AllowPlanN), which carry the rate on version 0 too; ver is rec.v as
	// a script argument.
	suffix, planSuffix, ver string
	// minTTL is the shortest expiry, in milliseconds, of a state written
	// under rec: base.minTTL, and under a changed rate (v > 0) at least
	// twice the refresh interval, so that the state, or what is left of it
	// when emptied (its suffix alone), outlives every instance's older
	// view (see "How an emptied key keeps its version").
	minTTL string
	alg    any // the limiter's parameters: *tbParams, *slParams, *scParams
}

// suffixFor returns the suffix of the states a decision of mode m writes.
func (v *rateView) suffixFor(m planMode) string {
	if m == plainMode {
		return v.suffix
	}
	return v.planSuffix
}

// changeAt returns the conversion of a state of an older version to v:
// as of v's change, as its strategy says.
func (v *rateView) changeAt() convertAt {
	return convertAt{tc: v.rec.tc, how: inherit.Strategy(v.rec.how)}
}

// rates is the part of base that follows the rate record.
type rates struct {
	record  string // the record's key
	compile func(rateParams) (any, error)
	refresh time.Duration
	mu      sync.Mutex // one record read at a time; guards unconfirmed
	// unconfirmed is the change whose last write got no reply (see
	// setRate); the next SetRate of the same change sends it again.
	unconfirmed *pendingChange
	// checked is the local monotonic time, since base.epoch, at which the
	// last record read began; a read that began earlier is stale.
	checked atomic.Int64
	// readAt is when the last read that reached the record began, as
	// checked (which a failed lease refresh also moves, see
	// refreshLeased): readRateSince is served by any read begun later.
	readAt atomic.Int64
	view   atomic.Pointer[rateView]
}

var (
	readRateScript  = newScript(readRateSrc)
	writeRateScript = newScript(prelude + writeRateSrc)
)

// initRates sets up the rate of a limiter built with p: version 0 until
// the record says otherwise.
func (l *base) initRates(kind string, p rateParams, c config, compile func(rateParams) (any, error)) error {
	l.rates.record = l.prefix + ":rate:" + kind
	l.rates.compile = compile
	l.rates.refresh = c.rateRefresh
	if l.rates.refresh == 0 {
		l.rates.refresh = DefaultRateRefresh
	}
	l.rates.checked.Store(-int64(l.rates.refresh)) // the first decision reads the record
	return l.adopt(rateRecord{rate: p, initial: p})
}

// minTTLms is minTTL as a number.
func (l *base) minTTLms() int64 {
	ms, _ := strconv.ParseInt(l.minTTL, 10, 64)
	return ms
}

// adopt makes rec the rate the limiter decides under.
func (l *base) adopt(rec rateRecord) error {
	alg, err := l.rates.compile(rec.rate)
	if err != nil {
		return fmt.Errorf("%w: the rate record %s holds a rate this limiter cannot take: %w", ErrRedis, l.rates.record, err)
	}
	v := &rateView{rec: rec, ver: strconv.FormatInt(rec.v, 10), alg: alg}
	v.planSuffix = fmt.Sprintf("|%d %d %d %d", rec.v, rec.rate.limit, rec.rate.period, rec.rate.burst)
	v.minTTL = l.minTTL
	if rec.v > 0 {
		v.suffix = v.planSuffix
		if least := 2 * l.rates.refresh.Milliseconds(); least > l.minTTLms() {
			v.minTTL = strconv.FormatInt(least, 10)
		}
	}
	l.rates.view.Store(v)
	if l.deny != nil {
		l.deny.clear() // its denials were under the old rate
	}
	if l.lease != nil {
		// Leases taken under the old rate allow nothing from now on.
		l.lease.reconfigure(l.lease.algo.rate(l.lease.cfg.MaxShare))
	}
	return nil
}

// refreshRate reads the record if it was last read a refresh interval
// ago or more: the decision path calls it before its round trip, where a
// failure is the decision's (the fallback, if any, answers).
func (l *base) refreshRate(ctx context.Context) error {
	if l.rates.compile == nil || int64(time.Since(l.epoch))-l.rates.checked.Load() < int64(l.rates.refresh) {
		return nil
	}
	return l.readRate(ctx, false)
}

// rateRead returns the version of the rate the limiter decides under,
// and whether it read the record within the refresh interval (a limiter
// without a rate: 0, true). Without a round trip: the deny cache answers
// only while it is fresh.
func (l *base) rateRead() (int64, bool) {
	if l.rates.compile == nil {
		return 0, true
	}
	fresh := int64(time.Since(l.epoch))-l.rates.checked.Load() < int64(l.rates.refresh)
	return l.rates.view.Load().rec.v, fresh
}

// checkCostNow checks a decision's cost n against the capacity of the
// rate the limiter decides under, and returns that capacity, the Limit to
// answer an error with. Only a negative n is refused here while the rate
// can change: a cost above the capacity is refused by the decision once
// it has read the record (evalRated), since even a view read within the
// refresh interval may be one another instance's SetRate has replaced,
// and a key another instance has already decided under the new rate must
// not be refused under the old one (the concurrency checker's "a decision
// under a rate older than one already seen", Cluster/AnyCost/SlidingLog,
// seed 276215802625810).
func (l *base) checkCostNow(n int) (int, error) {
	limit := l.limit()
	if l.rates.compile != nil && n >= 0 {
		return limit, nil
	}
	return limit, checkCost(n, limit)
}

// readRate reads the record, unless (force false) another caller read it
// while this one waited, and adopts it if it is newer. A record older
// than the one known, or missing, is put back (see rate_write.lua).
func (l *base) readRate(ctx context.Context, force bool) error {
	l.rates.mu.Lock()
	defer l.rates.mu.Unlock()
	if !force && int64(time.Since(l.epoch))-l.rates.checked.Load() < int64(l.rates.refresh) {
		return nil
	}
	return l.readRecord(ctx)
}

// readRateSince reads the record unless a read that began after since (a
// time as readAt) has reached it meanwhile: the callers that wait for
// one read share it, so a burst of them costs Redis one read at a time.
func (l *base) readRateSince(ctx context.Context, since int64) error {
	l.rates.mu.Lock()
	defer l.rates.mu.Unlock()
	if l.rates.readAt.Load() > since {
		return nil
	}
	return l.readRecord(ctx)
}

// readRecord reads the record and adopts it if it is newer than the one
// known, or puts the known one back if it is older or missing; rates.mu
// is held.
func (l *base) readRecord(ctx context.Context) error {
	start := int64(time.Since(l.epoch))
	r, err := readRateScript.run(ctx, l.client, []string{l.rates.record}, nil)
	if err != nil && (r == nil || !errors.Is(err, ErrNotReplicated)) { // a read needs no replica
		return fmt.Errorf("reading the rate record: %w", err)
	}
	known := l.rates.view.Load().rec
	rec, err := parseRecord(r)
	switch {
	case err != nil:
		return err
	case rec.v < known.v:
		if err := l.healRate(ctx, known); err != nil {
			return err
		}
	case rec.v > known.v:
		if err := l.adopt(rec); err != nil {
			return err
		}
	}
	l.rates.checked.Store(start)
	l.rates.readAt.Store(start)
	return nil
}

// healRate puts the known record back into Redis, where it is missing
// or older (rate_write.lua), and adopts what Redis then holds.
func (l *base) healRate(ctx context.Context, rec rateRecord) error {
	args := append([]string{"", "heal"}, rec.fields()...)
	r, err := l.writeRate(ctx, args)
	if err != nil && !errors.Is(err, ErrNotReplicated) {
		return err
	}
	if r.v > rec.v {
		return l.adopt(r)
	}
	return nil
}

// writeRate runs rate_write.lua with args and parses the record it
// replies with.
func (l *base) writeRate(ctx context.Context, args []string) (rateRecord, error) {
	r, err := writeRateScript.run(ctx, l.client, []string{l.rates.record}, args)
	if err != nil && (r == nil || !errors.Is(err, ErrNotReplicated)) {
		return rateRecord{}, fmt.Errorf("writing the rate record: %w", err)
	}
	rec, perr := parseRecord(r)
	if perr != nil {
		return rateRecord{}, perr
	}
	// Not acknowledged by the replicas (WithWaitReplicas), the record is on
	// the master: it is adopted, and the error returned.
	return rec, err
}

// ErrRateUnconfirmed is wrapped, with ErrRedis, by the error of a
// SetRate on Redis whose write got no reply before its context was done
// or the connection failed: the change may or may not be in Redis. Call
// SetRate again with the same RateChange to settle it: each change
// carries a number of its own, and a change sent again finds its own
// write if it was made, so it is made once, never twice (a StartFresh
// applied twice would forgive twice).
var ErrRateUnconfirmed = errors.New("redisstore: the change of rate may or may not have been made")

// pendingChange is a change of rate whose write got no reply.
type pendingChange struct {
	rate rateParams
	how  floodgate.Inherit
	id   int64
}

// changeID returns the number of a change of p under how: the one drawn
// for it last time if its write got no reply (see ErrRateUnconfirmed), a
// new one otherwise, below 2^53 so that the scripts hold it exactly.
func (r *rates) changeID(p rateParams, how floodgate.Inherit) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := r.unconfirmed; u != nil && u.rate == p && u.how == how {
		return u.id
	}
	return 1 + rand.Int64N(1<<53-1)
}

// settle records the outcome of the write of change id: confirmed (a
// reply came) or not.
func (r *rates) settle(p rateParams, how floodgate.Inherit, id int64, confirmed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !confirmed:
		r.unconfirmed = &pendingChange{rate: p, how: how, id: id}
	case r.unconfirmed != nil && r.unconfirmed.id == id:
		r.unconfirmed = nil
	}
}

// setRate makes p, under strategy how, the rate of every instance: it
// writes the record as a new version and adopts it, then waits a refresh
// interval for every other instance to read it (see above). p must have
// been checked. The write runs under ctx alone, not the decision timeout,
// and holds no lock meanwhile: decisions that read the record go on.
func (l *base) setRate(ctx context.Context, p rateParams, how floodgate.Inherit) error {
	if _, err := l.rates.compile(p); err != nil {
		return err
	}
	_, now, err := l.clock()
	if err != nil {
		return err
	}
	id := l.rates.changeID(p, how)
	initial := l.rates.view.Load().rec.initial
	args := []string{now, "bump", itoa(p.limit), itoa(p.period), itoa(p.burst), strconv.Itoa(int(how)),
		itoa(initial.limit), itoa(initial.period), itoa(initial.burst), itoa(id)}
	rec, err := l.writeRate(ctx, args)
	// A reply, even one the replicas did not acknowledge, says where the
	// record stands; none leaves the change unconfirmed.
	l.rates.settle(p, how, id, rec.v > 0)
	if rec.v > 0 {
		l.rates.mu.Lock()
		if rec.v > l.rates.view.Load().rec.v {
			if aerr := l.adopt(rec); aerr != nil && err == nil {
				err = aerr
			}
		}
		l.rates.mu.Unlock()
	}
	if err != nil {
		l.counts.countError(err)
		if rec.v == 0 {
			return fmt.Errorf("%w: %w: %w", ErrRedis, ErrRateUnconfirmed, err)
		}
		return fmt.Errorf("%w: %w", ErrRedis, err)
	}
	t := time.NewTimer(l.rates.refresh)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redisstore: the rate is changed in Redis (version %d), but the other instances may decide under the old one for up to %v more: %w",
			rec.v, l.rates.refresh, ctx.Err())
	}
}

// fields returns the record as rate_write.lua's heal arguments.
func (rec rateRecord) fields() []string {
	return []string{itoa(rec.v), itoa(rec.rate.limit), itoa(rec.rate.period), itoa(rec.rate.burst),
		strconv.Itoa(int(rec.how)), itoa(rec.tc), itoa(rec.initial.limit), itoa(rec.initial.period), itoa(rec.initial.burst),
		itoa(rec.id)}
}

// parseRecord reads a record from a script's reply: {0} for none.
func parseRecord(r []int64) (rateRecord, error) {
	if len(r) == 1 && r[0] == 0 {
		return rateRecord{}, nil
	}
	if len(r) != 10 || r[0] <= 0 || r[4] < int64(floodgate.KeepUsed) || r[4] > int64(floodgate.StartFresh) {
		return rateRecord{}, fmt.Errorf("malformed rate record %v", r)
	}
	return rateRecord{v: r[0], rate: rateParams{r[1], r[2], r[3]}, how: floodgate.Inherit(r[4]), tc: r[5],
		initial: rateParams{r[6], r[7], r[8]}, id: r[9]}, nil
}

// stateRate returns the rate of a state a conversion reply carried (see
// splitState): its own, or the initial one for a state of version 0 that
// carries none.
func (rec rateRecord) stateRate(st []int64) rateParams {
	_, v, p := splitState(st)
	if v == 0 && p[0] == 0 {
		return rec.initial
	}
	return rateParams{p[0], p[1], p[2]}
}

// Replies of a decision script that did not decide (see prelude_rate.lua).
const (
	replyStale   = -1
	replyConvert = -2
	replyPlan    = -3
)

// planMode is how a decision treats a key's state written under another
// rate of its own version, which only a plan's decision meets: a
// PlanLimiter's key whose plan changed (AllowPlanN).
type planMode uint8

const (
	// plainMode (AllowN) stamps no rate on states of version 0, and takes
	// a state of its version as it stands.
	plainMode planMode = iota
	// planKeep and planScale (AllowPlanN) stamp their rate on every state
	// and convert one of another rate, as of now, under KeepUsed or
	// ScaleUsed (PlanConfig.Inherit): in the script when the rates share
	// their period (as a PlanLimiter's plans do), in Go otherwise.
	planKeep
	planScale
)

// planModeOf returns the mode of a plan's decision under strategy how.
func planModeOf(how floodgate.Inherit) (planMode, error) {
	switch how {
	case floodgate.KeepUsed:
		return planKeep, nil
	case floodgate.ScaleUsed:
		return planScale, nil
	}
	return plainMode, fmt.Errorf("%w: a plan change takes KeepUsed or ScaleUsed, not %v", floodgate.ErrInvalidOption, how)
}

// strategy returns the strategy m converts a plan change with; a plain
// decision that meets one (a state another limiter of the prefix wrote
// under its own rate) keeps what the key used.
func (m planMode) strategy() inherit.Strategy {
	if m == planScale {
		return inherit.ScaleUsed
	}
	return inherit.KeepUsed
}

// arg returns the plan strategy argument of the decision scripts: ""
// for a plain decision, else the strategy's number.
func (m planMode) arg() string {
	switch m {
	case planKeep:
		return "0"
	case planScale:
		return "1"
	}
	return ""
}

// convertAt is the time as of which a state is converted, and how.
type convertAt struct {
	tc  int64 // microseconds on the limiter's clock
	how inherit.Strategy
}

// maxRateTries bounds the round trips of one decision that meets changes
// of rate: a conversion, a record read, and the decision.
const maxRateTries = 4

// errRateChurn reports a decision that met a new rate at every try. It
// never leaves the limiter as an error: failed answers it with a busy
// denial (churnDenied), which no error policy lets through.
var errRateChurn = errors.New("the rate kept changing during the decision")

func itoa(x int64) string { return strconv.FormatInt(x, 10) }

// conversion is what a decision sends: the suffix of the states it
// writes, and after it converted a state, the state it saw (expect) and
// the converted one (with), its numbers ("" for a fresh state) followed by
// the suffix of the view it was converted for; both "" otherwise.
type conversion struct {
	suffix, expect, with string
}

// ratedScript is an algorithm's decision script as evalRated runs it:
// build returns the script and its arguments under a view and a
// conversion, convert converts a state the script replied with (its
// numbers, version and rate) to the view's rate as at says and returns
// its numbers, and read turns the script's reply of want integers into
// the Decision.
//
// The keys travel apart: escape analysis follows a struct as a whole, and
// the keys, handed to the Scripter, escape, which would move the
// functions to the heap with them (three allocations a decision).
type ratedScript struct {
	build   func(v *rateView, conv conversion) (*script, []string)
	convert func(v *rateView, st []int64, at convertAt) string
	want    int
	read    func(v *rateView, r []int64, n int) (floodgate.Decision, error)
}

// evalRated runs the decision script rs on keys, of mode m, that may meet a
// change of rate or of plan. A reply that the state is newer than the
// view makes it read the record again; one that it is older, or of
// another plan, convert it and send it with the next try. If that try is
// under a newer view (another decision read the record meanwhile), a
// state of an older version is converted again for that view, and one of
// another plan is asked for again (under the newer view it may be of an
// older version): the script takes a conversion only under the view it
// names (prelude_rate.lua).
func (l *base) evalRated(ctx context.Context, keys []string, n int, m planMode, rs ratedScript) (floodgate.Decision, error) {
	var (
		conv    conversion
		seen    []int64   // the state conv converts, as the script replied it
		convFor *rateView // the view conv was computed for
		plan    bool      // seen is of another plan, not of an older version
	)
	for range maxRateTries {
		v := l.rates.view.Load()
		if n > int(v.rec.rate.burst) {
			// Refused only under the record as read after this call
			// began (checkCostNow): by a read begun from now on, which
			// costs no try.
			if err := l.readRateSince(ctx, int64(time.Since(l.epoch))); err != nil {
				return floodgate.Decision{Limit: l.limit()}, err
			}
			if v = l.rates.view.Load(); n > int(v.rec.rate.burst) {
				return floodgate.Decision{Limit: int(v.rec.rate.burst)}, checkCost(n, int(v.rec.rate.burst))
			}
		}
		conv.suffix = v.suffixFor(m)
		switch {
		case seen == nil || convFor == v:
		case plan:
			conv.expect, conv.with, seen = "", "", nil
		default:
			// Another decision read a newer record since: convert again,
			// for this view, rather than have the script refuse it.
			conv.with, convFor = rs.convert(v, seen, v.changeAt())+conv.suffix, v
		}
		s, args := rs.build(v, conv)
		r, unrepl, err := l.reply(ctx, s, keys, args, -1)
		if err != nil {
			return floodgate.Decision{Limit: l.limit()}, err
		}
		switch {
		case len(r) == 1 && r[0] == replyStale:
			if err := l.readRate(ctx, true); err != nil {
				return floodgate.Decision{Limit: l.limit()}, err
			}
			conv.expect, conv.with, seen = "", "", nil
		case len(r) >= 7 && r[0] == replyConvert:
			// The conversion names the view it was computed for: the
			// script refuses it under any other (prelude_rate.lua).
			seen, convFor, plan = r[1:], v, false
			conv.expect, conv.with = stateString(seen), rs.convert(v, seen, v.changeAt())+conv.suffix
		case len(r) >= 8 && r[0] == replyPlan:
			// As of the script's now (r[1]): the plan changes when its key
			// is first decided under the new one.
			seen, convFor, plan = r[2:], v, true
			conv.expect, conv.with = stateString(seen), rs.convert(v, seen, convertAt{tc: r[1], how: m.strategy()})+conv.suffix
		case len(r) != rs.want:
			return floodgate.Decision{Limit: l.limit()}, fmt.Errorf("unexpected script reply %v: want %d integers", r, rs.want)
		default:
			d, err := rs.read(v, r, n)
			if err != nil {
				return d, err
			}
			return d, replicated(d, n, unrepl)
		}
	}
	return floodgate.Decision{Limit: l.limit()}, errRateChurn
}

// refundRated runs a refund script that may meet a change of rate (see
// evalRated): a state of a newer version makes it read the record again,
// one of an older version is converted first by a report (a decision of
// cost 0, eval), which writes it back.
func (l *base) refundRated(ctx context.Context, keys []string, now string,
	build func(v *rateView) (*script, []string), eval evalFunc, key string,
) error {
	_, err := l.repliedRated(ctx, keys, now, build, eval, key)
	return err
}

// repliedRated is refundRated returning the script's reply, for the
// sliding log's charge, which converts a log in its own script and so
// never meets a state to convert here.
func (l *base) repliedRated(ctx context.Context, keys []string, now string,
	build func(v *rateView) (*script, []string), eval evalFunc, key string,
) ([]int64, error) {
	for range maxRateTries {
		s, args := build(l.rates.view.Load())
		r, err := s.run(ctx, l.client, keys, args)
		switch {
		case err != nil:
			return nil, err
		case len(r) == 1 && r[0] == replyStale:
			if err := l.readRate(ctx, true); err != nil {
				return nil, err
			}
		case len(r) >= 7 && r[0] == replyConvert:
			if _, err := eval(ctx, key, 0, now); err != nil {
				return nil, err
			}
		default:
			return r, nil
		}
	}
	return nil, errRateChurn
}

// chargeRated runs a charge script (build, convert: as a decision's, see
// ratedScript) that replies want integers, and returns its reply. It
// meets a change of rate as a decision does, converting a state of an
// older version in its own round trip under the view it reads, never
// through a decision under another. A charge always writes, and no
// capacity refuses it: it runs as a decision of cost 1 that is always
// allowed, so that a write the replicas did not acknowledge is an error
// (replicated).
func (l *base) chargeRated(ctx context.Context, keys []string, build func(v *rateView, conv conversion) (*script, []string),
	convert func(v *rateView, st []int64, at convertAt) string, want int,
) ([]int64, error) {
	var reply []int64
	_, err := l.evalRated(ctx, keys, 1, plainMode, ratedScript{build: build, convert: convert, want: want,
		read: func(_ *rateView, r []int64, _ int) (floodgate.Decision, error) {
			reply = r
			return floodgate.Decision{Allowed: true}, nil
		}})
	return reply, err
}

// stateString returns the state a conversion reply carried (its numbers,
// then version, rate and burst) as the script stored it: the numbers
// alone for a state of version 0 that carries no rate.
func stateString(st []int64) string {
	body, v, rate := splitState(st)
	var b strings.Builder
	join := func(xs []int64) {
		for i, x := range xs {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatInt(x, 10))
		}
	}
	join(body)
	if v > 0 || rate[0] > 0 {
		b.WriteByte('|')
		join(append([]int64{v}, rate...))
	}
	return b.String()
}

// splitState splits a state a conversion reply carried into its numbers
// (the algorithm's, and a leasing limiter's after them), its version and
// the numbers of its rate.
func splitState(st []int64) (body []int64, v int64, rate []int64) {
	k := len(st) - 4
	return st[:k], st[k], st[k+1:]
}

// rateMet handles a reply of a script that met a state of another
// version (see prelude_rate.lua) without converting it itself (the lease
// scripts): for a newer one it reads the record again, for an
// older one it has a report decision (eval, of cost 0) convert it. It
// reports whether the script should run again.
func (l *base) rateMet(ctx context.Context, key, now string, r []int64, eval evalFunc) (bool, error) {
	switch {
	case len(r) == 1 && r[0] == replyStale:
		return true, l.readRate(ctx, true)
	case len(r) >= 7 && r[0] == replyConvert:
		_, err := eval(ctx, key, 0, now)
		return true, err
	}
	return false, nil
}
