package floodgate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/internal/pace"
)

// errorLogPeriod paces the log lines about errors (a store that is down
// fails every request) and about requests refused for the client's own
// doing: at most one line per period and kind, with a count of the lines
// suppressed in between.
const errorLogPeriod = time.Second

// configLogPeriod paces the log lines that ask for a configuration change
// (a misconfigured key function, untrusted forwarding headers, evictions
// of live limits): the condition holds for every request until someone
// acts, and one line a minute says so without burying the rest.
const configLogPeriod = time.Minute

// hookWatchOneIn: with a decision hook but no logger, the gate looks at
// the store's evictions on one call in hookWatchOneIn, picked by the
// runtime's per-thread random source (no shared counter, no clock read on
// the others): reading the clock on every call would cost a metrics hook
// a third of the middleware's time. A key spray is a flood, so its
// evictions still reach the hook within a second or so.
const hookWatchOneIn = 64

// gateLogs is the state of a gate's paced log lines.
type gateLogs struct {
	denials *pace.Keys // nil without a logger

	mu        sync.Mutex     // guards the windows below
	errorLog  pace.Window    // failures of the limiter
	clientLog pace.Window    // the client's own doing, hang-ups
	configLog pace.Window    // misconfigurations
	evictLog  pace.Window    // live evictions
	evicted   evictionSample // live evictions and lost debts not yet logged
}

// paced paces the lines of one window.
func (g *Gate) paced(w *pace.Window, period time.Duration) (bool, uint64) {
	now := g.cfg.now()
	g.logs.mu.Lock()
	defer g.logs.mu.Unlock()
	return w.Admit(now, period)
}

// where returns the attributes that say where a call went.
func (out *Outcome) where() (slog.Attr, slog.Attr, slog.Attr) {
	c := &out.Call
	method, path := c.Method, c.Path
	if r := c.Request; r != nil && method == "" && path == "" {
		method, path = r.Method, r.URL.Path
	}
	return slog.String("policy", c.Policy()), slog.String("method", method), slog.String("path", path)
}

func (g *Gate) logDenial(ctx context.Context, out *Outcome) {
	ok, suppressed, other := g.logs.denials.Admit(out.Call.Key, g.cfg.now(), out.Decision.ResetAfter)
	if !ok {
		return
	}
	policy, method, path := out.where()
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "rate limit exceeded",
		policy,
		slog.String("key", out.Call.Key),
		method, path,
		slog.String("retry_after", out.Decision.RetryAfter.Round(time.Millisecond).String()),
		slog.Bool("dry_run", g.cfg.dryRun),
		slog.Uint64("suppressed", suppressed),
		slog.Uint64("suppressed_other", other))
}

func (g *Gate) logError(ctx context.Context, out *Outcome, err error) {
	if g.cfg.logger == nil {
		return
	}
	ok, suppressed := g.paced(&g.logs.errorLog, errorLogPeriod)
	if !ok {
		return
	}
	msg, letThrough := "rate limiter could not decide", g.cfg.failOpen || g.cfg.dryRun
	if out.Kind == OutcomeKeyFailed {
		// Never the error policy's to forgive: say so, since a line
		// reading fail_open=true would be a lie.
		msg, letThrough = "rate limit could not key or price a request; it is refused under every error policy", g.cfg.dryRun
	}
	policy, method, path := out.where()
	g.cfg.logger.LogAttrs(ctx, slog.LevelError, msg,
		policy, method, path,
		slog.String("error", err.Error()),
		slog.Bool("fail_open", letThrough),
		slog.Uint64("suppressed", suppressed))
}

// logClient logs a call refused for its own doing, or whose client went
// away, at DEBUG: an attacker can produce them at will. An HTTP call's
// line carries the status it is answered with.
func (g *Gate) logClient(ctx context.Context, out *Outcome) {
	l := g.cfg.logger
	if l == nil || !l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	ok, suppressed := g.paced(&g.logs.clientLog, errorLogPeriod)
	if !ok {
		return
	}
	msg := "rate limiter refused a request for the client's own doing"
	status := StatusClientClosedRequest
	if out.Kind == OutcomeHungUp {
		msg = "client went away during the rate limit decision"
	} else {
		status = ErrorStatus(out.Err)
	}
	policy, method, path := out.where()
	attrs := []slog.Attr{policy, method, path, slog.String("outcome", out.Kind.String())}
	if out.Call.Request != nil {
		attrs = append(attrs, slog.Int("status", status))
	}
	attrs = append(attrs, slog.String("error", out.Err.Error()), slog.Uint64("suppressed", suppressed))
	l.LogAttrs(ctx, slog.LevelDebug, msg, attrs...)
}

// logMisconfig logs an error that the server's configuration causes,
// with slog.Default when no logger is set: it refuses every call it
// touches, so it must be seen.
func (g *Gate) logMisconfig(ctx context.Context, out *Outcome) {
	ok, suppressed := g.paced(&g.logs.configLog, configLogPeriod)
	if !ok {
		return
	}
	l := g.cfg.logger
	if l == nil {
		l = slog.Default()
	}
	policy, method, path := out.where()
	l.LogAttrs(ctx, slog.LevelError, "floodgate: the rate limit is misconfigured; requests it applies to are refused until it is fixed",
		policy, method, path,
		slog.String("error", out.Err.Error()),
		slog.Uint64("suppressed", suppressed))
}

// logEvictions reports the live limits evicted from p's limiter, and the
// debts its debt memory could not keep apart, since the last sample: one
// WARN a minute at most, with the counts held back in between.
func (g *Gate) logEvictions(ctx context.Context, p *policy, s evictionSample) {
	now := g.cfg.now()
	g.logs.mu.Lock()
	g.logs.evicted.evicted += s.evicted
	g.logs.evicted.lost += s.lost
	ok, _ := g.logs.evictLog.Admit(now, configLogPeriod)
	s = g.logs.evicted
	if ok {
		g.logs.evicted = evictionSample{}
	}
	g.logs.mu.Unlock()
	if !ok {
		return
	}
	msg := "floodgate: the limiter's store evicted live limits (their debts are kept in its debt memory, exactly while it has room and rounded up, never down, when it is full): the store is too small for its keys (raise WithMaxKeys) or someone is spraying keys"
	if s.lost > 0 {
		msg = "floodgate: the limiter's debt memory is full: debts of evicted live limits now share bounds, so fresh keys that hash there start limited (under WithForgetOverflow or WithForgetEvicted they are forgotten instead, resetting those clients' limits): a key spray beyond the size the store is built for is under way, or raise WithMaxKeys or WithDebtMemory"
	}
	g.cfg.logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("policy", p.Name),
		slog.Uint64("evicted_live", s.evicted),
		slog.Uint64("debts_lost", s.lost))
}
