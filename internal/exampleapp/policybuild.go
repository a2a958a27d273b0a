package exampleapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// PolicyOptions is what a policy file's limits are built with, besides
// the file.
type PolicyOptions struct {
	// Logger receives denials, errors, sign-ups and reloads. Required.
	Logger *slog.Logger
	// Clock drives the limiters and the middleware. Nil: the real clock.
	Clock func() time.Time
	// DecisionHook, when set, is every policy's decision hook.
	DecisionHook func(floodgate.DecisionEvent)
	// BotCheck builds the bot check a file's botCheck asks for, resolving
	// client IPs through proxies. Nil: a file with a botCheck is refused
	// (no secret to verify tokens with).
	BotCheck func(spec BotCheckSpec, proxies []netip.Prefix) (func(http.Handler) http.Handler, error)
	// RequireBotCheck refuses a file without a botCheck: the operator set
	// a Turnstile secret and expects sign-ups to be checked.
	RequireBotCheck bool
}

// policyLimiter is an in-memory limiter that takes a new rate while
// serving: a TokenBucket, SlidingLog or SlidingCounter.
type policyLimiter interface {
	floodgate.Limiter
	floodgate.RateSetter
}

// builtLimiter is a policy's limiter with what it was built from.
type builtLimiter struct {
	// shape is what a reload must find unchanged to keep the limiter:
	// algorithm, key and routes. A change of rate alone keeps it.
	shape string
	rate  RateSpec
	lim   policyLimiter
}

// policySet is one file's limits, built: the handler requests are
// served by, and its limiters by policy name.
type policySet struct {
	handler  http.Handler
	limiters map[string]*builtLimiter
}

// rateChange is a change of rate a reload applies to a kept limiter
// once the new set is built.
type rateChange struct {
	name     string
	lim      policyLimiter
	from, to RateSpec
}

// ReloadReport is what a reload did, by policy name.
type ReloadReport struct {
	Kept    []string // same limiter, same rate: every key's state as it was
	Changed []string // same limiter, new rate (SetRate, KeepUsed)
	Built   []string // a new limiter: a new policy, or a new algorithm, key or routes
	Dropped []string // policies no longer in the file
}

// builder builds one file's set, reusing the limiters of old.
type builder struct {
	pf      *PolicyFile
	opts    PolicyOptions
	old     map[string]*builtLimiter
	set     *policySet
	changes []rateChange
	report  ReloadReport
	ipOpts  []floodgate.IPOption
}

// buildPolicySet builds pf into a set, keeping old's limiters where
// the shape is unchanged. Nothing is changed on old's limiters: the
// returned changes are for the caller to apply once the build succeeded.
func buildPolicySet(pf *PolicyFile, opts PolicyOptions, old *policySet) (*policySet, []rateChange, ReloadReport, error) {
	b := &builder{pf: pf, opts: opts, set: &policySet{limiters: map[string]*builtLimiter{}}}
	if old != nil {
		b.old = old.limiters
	}
	if proxies := pf.prefixes(); len(proxies) > 0 {
		b.ipOpts = []floodgate.IPOption{floodgate.TrustProxies(proxies...), floodgate.FromXForwardedFor()}
		if _, err := floodgate.KeyByIP(b.ipOpts...); err != nil {
			return nil, nil, ReloadReport{}, causeErr("trustedProxies", err)
		}
	}
	h, err := b.handler()
	if err != nil {
		return nil, nil, ReloadReport{}, err
	}
	b.set.handler = h
	for name := range b.old {
		if _, ok := b.set.limiters[name]; !ok {
			b.report.Dropped = append(b.report.Dropped, name)
		}
	}
	sort.Strings(b.report.Dropped) // map order would make each log line differ
	return b.set, b.changes, b.report, nil
}

// handler returns the set's handler: a dispatcher that runs each request
// through the policies whose routes it matches, in file order, behind the
// bot check if its routes match.
func (b *builder) handler() (http.Handler, error) {
	d := &dispatcher{mux: serviceMux(b.opts.Logger), patterns: map[string]int{}}
	for i := range b.pf.Policies {
		path := fmt.Sprintf("policies[%d]", i)
		routes, err := d.routeMask(path+".routes", b.pf.Policies[i].Routes)
		if err != nil {
			return nil, err
		}
		mw, err := b.policy(path, &b.pf.Policies[i])
		if err != nil {
			return nil, err
		}
		d.policies = append(d.policies, routedMiddleware{mw: mw, routes: routes})
	}
	if err := b.botCheck(d); err != nil {
		return nil, err
	}
	d.chains.Store(&map[uint64]http.Handler{})
	return d, nil
}

// botCheck puts the file's bot check in front of d's policies on its
// routes.
func (b *builder) botCheck(d *dispatcher) error {
	bc := b.pf.BotCheck
	if bc == nil {
		if b.opts.RequireBotCheck {
			return fieldErr("botCheck", "required: TURNSTILE_SECRET is set, and without a botCheck sign-ups would not be checked")
		}
		return nil
	}
	if b.opts.BotCheck == nil {
		return fieldErr("botCheck", "TURNSTILE_SECRET is not set: no secret to verify tokens with")
	}
	routes, err := d.routeMask("botCheck.routes", bc.Routes)
	if err != nil {
		return err
	}
	check, err := b.opts.BotCheck(*bc, b.pf.prefixes())
	if err != nil {
		return causeErr("botCheck", err)
	}
	d.botCheck = routedMiddleware{mw: check, routes: routes}
	return nil
}

// policy builds the middleware of the policy p at path.
func (b *builder) policy(path string, p *PolicySpec) (func(http.Handler) http.Handler, error) {
	mwOpts, err := b.middlewareOptions(path, p)
	if err != nil {
		return nil, err
	}
	routes := strings.Join(p.Routes, "\n")
	first, err := b.limited(path, routes, p.Name, p.Key, p.Rate)
	if err != nil {
		return nil, err
	}
	if len(p.Fallback) == 0 {
		mw, err := floodgate.NewMiddleware(first.Limiter, append(mwOpts,
			floodgate.WithPolicyName(first.Name), floodgate.WithKeyFunc(first.Key))...)
		return mw, wrapAt(path, err)
	}
	policies := []floodgate.Policy{first}
	for j, f := range p.Fallback {
		fp, err := b.limited(fmt.Sprintf("%s.fallback[%d]", path, j), routes, f.Name, f.Key, f.Rate)
		if err != nil {
			return nil, err
		}
		policies = append(policies, fp)
	}
	sel, err := floodgate.NewPolicySelector(policies...)
	if err != nil {
		return nil, causeErr(path, err)
	}
	mw, err := floodgate.NewPolicyMiddleware(sel, mwOpts...)
	return mw, wrapAt(path, err)
}

// wrapAt names path in err, if any.
func wrapAt(path string, err error) error {
	if err == nil {
		return nil
	}
	return causeErr(path, err)
}

// middlewareOptions returns the options every limit of p shares.
func (b *builder) middlewareOptions(path string, p *PolicySpec) ([]floodgate.MiddlewareOption, error) {
	style := p.Headers
	if style == "" {
		style = b.pf.Headers
	}
	opts := []floodgate.MiddlewareOption{
		floodgate.WithLogger(b.opts.Logger),
		floodgate.WithHeaders(headerStyles[style]), // "" is absent: HeadersIETF, the zero value
	}
	if b.opts.Clock != nil {
		opts = append(opts, floodgate.WithWallClock(b.opts.Clock))
	}
	if b.opts.DecisionHook != nil {
		opts = append(opts, floodgate.WithDecisionHook(b.opts.DecisionHook))
	}
	if len(p.DeniedBody) > 0 {
		var body bytes.Buffer
		if err := json.Compact(&body, p.DeniedBody); err != nil {
			return nil, causeErr(path+".deniedBody", err)
		}
		denied, err := floodgate.StaticJSON(body.Bytes())
		if err != nil {
			return nil, causeErr(path+".deniedBody", err)
		}
		opts = append(opts, floodgate.WithDeniedHandler(denied))
	}
	return opts, nil
}

// limited returns the named policy of key and rate at path: its key
// function and its limiter, kept from the old set if the shape is
// unchanged.
func (b *builder) limited(path, routes, name string, key KeySpec, rate RateSpec) (floodgate.Policy, error) {
	kf, err := b.keyFunc(path+".key", key)
	if err != nil {
		return floodgate.Policy{}, err
	}
	keyJSON, _ := json.Marshal(key)
	shape := rate.Algorithm + "\x00" + string(keyJSON) + "\x00" + routes
	bl, err := b.limiter(path, name, shape, rate)
	if err != nil {
		return floodgate.Policy{}, err
	}
	b.set.limiters[name] = bl
	return floodgate.Policy{Name: name, Limiter: bl.lim, Key: kf}, nil
}

// limiter returns the old limiter of name if its shape is unchanged
// (noting a change of rate to apply), or a new one.
func (b *builder) limiter(path, name, shape string, rate RateSpec) (*builtLimiter, error) {
	if old, ok := b.old[name]; ok && old.shape == shape {
		if old.rate == rate {
			b.report.Kept = append(b.report.Kept, name)
			return old, nil
		}
		// Checked before anything changes: SetRate would refuse what
		// the constructor refuses.
		if _, err := newPolicyLimiter(rate, b.opts.Clock); err != nil {
			return nil, causeErr(path+".rate", err)
		}
		b.changes = append(b.changes, rateChange{name: name, lim: old.lim, from: old.rate, to: rate})
		b.report.Changed = append(b.report.Changed, name)
		return &builtLimiter{shape: shape, rate: rate, lim: old.lim}, nil
	}
	lim, err := newPolicyLimiter(rate, b.opts.Clock)
	if err != nil {
		return nil, causeErr(path+".rate", err)
	}
	b.report.Built = append(b.report.Built, name)
	return &builtLimiter{shape: shape, rate: rate, lim: lim}, nil
}

// newPolicyLimiter builds an in-memory limiter of rate on clock.
func newPolicyLimiter(rate RateSpec, clock func() time.Time) (policyLimiter, error) {
	var opts []floodgate.Option
	if clock != nil {
		opts = append(opts, floodgate.WithClock(clock))
	}
	switch rate.Algorithm {
	case algoTokenBucket:
		if rate.Burst > 0 {
			opts = append(opts, floodgate.WithBurst(rate.Burst))
		}
		return floodgate.NewTokenBucket(rate.rate(), opts...)
	case algoSlidingLog:
		return floodgate.NewSlidingLog(rate.rate(), opts...)
	case algoSlidingCounter:
		return floodgate.NewSlidingCounter(rate.rate(), opts...)
	}
	return nil, fmt.Errorf("%w: unknown algorithm %q", floodgate.ErrInvalidRate, rate.Algorithm)
}

// keyFunc builds the key function of k.
func (b *builder) keyFunc(path string, k KeySpec) (floodgate.KeyFunc, error) {
	var kf floodgate.KeyFunc
	var err error
	switch {
	case k.IP != nil:
		opts := append([]floodgate.IPOption(nil), b.ipOpts...)
		if k.IP.IPv6Prefix != 0 {
			opts = append(opts, floodgate.WithIPv6Prefix(k.IP.IPv6Prefix))
		}
		if k.IP.IPv4Prefix != 0 {
			opts = append(opts, floodgate.WithIPv4Prefix(k.IP.IPv4Prefix))
		}
		kf, err = floodgate.KeyByIP(opts...)
	case k.Header != "":
		kf, err = floodgate.KeyByHeader(k.Header)
	case k.Query != "":
		kf, err = floodgate.KeyByQuery(k.Query)
	case k.Form != "":
		kf, err = floodgate.KeyByForm(k.Form)
	default:
		max := k.MaxBytes
		if max == 0 {
			max = maxBodyBytes
		}
		kf, err = floodgate.KeyByJSONField(k.JSON, max)
	}
	if err == nil && k.Pattern {
		kf, err = floodgate.KeyByPattern(kf)
	}
	if err != nil {
		return nil, causeErr(path, err)
	}
	return kf, nil
}

// applyChanges sets the new rates of a reload, in order; if one fails,
// those already set are put back (under KeepUsed a change and its
// reverse leave every key as it was) and the error is returned.
func applyChanges(changes []rateChange) error {
	for i, c := range changes {
		err := c.lim.SetRate(context.Background(), floodgate.RateChange{Rate: c.to.rate(), Burst: c.to.Burst})
		if err == nil {
			continue
		}
		for _, done := range changes[:i] {
			_ = done.lim.SetRate(context.Background(), floodgate.RateChange{Rate: done.from.rate(), Burst: done.from.Burst})
		}
		return fmt.Errorf("policy %q: %w", c.name, err)
	}
	return nil
}

// serviceMux returns the service's routes without any limit: the policy
// file's policies wrap it.
func serviceMux(logger *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", userIDAvailable)
	mux.Handle("POST /signup", signupHandler(logger))
	mux.HandleFunc("POST /rewards/claim", claimReward)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}
