package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/grpc/codes"
)

// Option configures the interceptors (New, NewPolicy, NewRoutes). Each
// may be given once (WithSkip accumulates); a repeated, invalid or
// conflicting option is an error wrapping floodgate.ErrInvalidOption.
type Option func(*config) error

type config struct {
	gate        []floodgate.MiddlewareOption // the admission core's options
	key         KeyFunc
	policyName  string
	skip        []func(ctx context.Context, fullMethod string) bool
	counts      func(codes.Code) bool
	cost        func(Response) (int, bool)
	limitHealth bool
	headers     floodgate.HeaderStyle
	// quotaOnAllowed: WithQuotaOnAllowed.
	quotaOnAllowed bool
	given          map[string]bool
}

func (c *config) once(name string) error {
	if c.given[name] {
		return fmt.Errorf("%w: %s given twice", floodgate.ErrInvalidOption, name)
	}
	c.given[name] = true
	return nil
}

// gateOption passes an option of the admission core through.
func gateOption(name string, o floodgate.MiddlewareOption) Option {
	return func(c *config) error {
		c.gate = append(c.gate, o)
		return c.once(name)
	}
}

// WithKeyFunc sets how New keys a call (default KeyByIP(): the peer's
// address only). NewPolicy and NewRoutes do not take it: their policies
// carry their key functions.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithKeyFunc: nil key function (a key function constructor returns nil with its error: check it)", floodgate.ErrInvalidOption)
		}
		c.key = f
		return c.once("WithKeyFunc")
	}
}

// WithPolicyName sets the policy name New sends in the quota metadata
// (default floodgate.DefaultPolicyName); printable ASCII. NewPolicy and
// NewRoutes do not take it.
func WithPolicyName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("%w: empty policy name", floodgate.ErrInvalidOption)
		}
		c.policyName = name
		return c.once("WithPolicyName")
	}
}

// WithCost sets the units every call costs (default 1), as
// floodgate.WithCost does; a stream costs it once, when it opens.
func WithCost(n int) Option { return gateOption("WithCost", floodgate.WithCost(n)) }

// WithHeaders selects the quota metadata a denial carries, and under
// WithQuotaOnAllowed an allowed call (default floodgate.HeadersIETF:
// ratelimit and ratelimit-policy; HeadersLegacy sends x-ratelimit-limit,
// x-ratelimit-remaining and x-ratelimit-reset; HeadersNone sends none but
// retry-after and grpc-retry-pushback-ms on a denial).
func WithHeaders(style floodgate.HeaderStyle) Option {
	set := gateOption("WithHeaders", floodgate.WithHeaders(style))
	return func(c *config) error {
		c.headers = style
		return set(c)
	}
}

// WithQuotaOnAllowed sends the quota metadata on allowed calls as well
// as on denials: a unary call's in its response headers as its handler
// returns (in the trailers if the handler failed, so that its failure
// stays Trailers-Only and a client's retry policy retries it, or if the
// headers have gone already), a stream's with its headers, set when it
// opens. By default only a denial carries the quota, in its
// Trailers-Only answer beside the RetryInfo and the pushback — all a
// grpc-go retry policy or a client reading RetryInfo needs — and an
// allowed call sends no metadata and formats none. Turn it on for
// clients that pace themselves by the remaining quota; each allowed call
// then carries two more keys (HeadersIETF), which cost a metadata map a
// call and what grpc-go charges for carrying them (docs/adapters.md has
// the figures). It conflicts with WithHeaders(floodgate.HeadersNone),
// which sends no quota.
func WithQuotaOnAllowed() Option {
	return func(c *config) error {
		c.quotaOnAllowed = true
		return c.once("WithQuotaOnAllowed")
	}
}

// WithLogger logs denials and failures to decide as floodgate.WithLogger
// does (paced: a flood does not flood the log); the path logged is the
// full method, the method "POST".
func WithLogger(l *slog.Logger) Option { return gateOption("WithLogger", floodgate.WithLogger(l)) }

// WithDecisionHook calls hook for every decision, as
// floodgate.WithDecisionHook does; DecisionEvent.Request is nil.
func WithDecisionHook(hook func(floodgate.DecisionEvent)) Option {
	return gateOption("WithDecisionHook", floodgate.WithDecisionHook(hook))
}

// WithSkip exempts the calls for which skip returns true: they reach the
// handler without a decision or metadata. Several WithSkip options exempt
// a call if any of them does. The health service is exempt already (see
// WithLimitHealth).
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return func(c *config) error {
		if skip == nil {
			return fmt.Errorf("%w: nil skip predicate", floodgate.ErrInvalidOption)
		}
		c.skip = append(c.skip, skip)
		return nil
	}
}

// WithLimitHealth limits the calls of the standard health service,
// grpc.health.v1.Health (Check, Watch, List), like any other. By default
// they are exempt: a client using grpc-go's client-side health checking
// keeps a Watch stream open per connection and, if that stream is refused,
// marks the whole channel unhealthy, so that every call fails with
// Unavailable once the quota is spent — the limit would take the service
// down for the very client it only meant to slow. The health service
// answers from memory; limit it only if it does more.
func WithLimitHealth() Option {
	return func(c *config) error {
		c.limitHealth = true
		return c.once("WithLimitHealth")
	}
}

// WithFailOpen lets a call through when the limiter or its store fails.
// The default is to fail closed with codes.Unavailable: the limiter is a
// security control, and failing open hands an attacker who can make it
// fail an unlimited method. A call refused for its own doing
// (floodgate.ErrNoKey, ErrNoClientIP, ErrKeyTooLong) is
// codes.InvalidArgument even so, a key function's own error (a lookup
// that failed) codes.Unavailable, and a call whose client went away
// during the decision never runs: only the limiter's failures are let
// through.
func WithFailOpen() Option { return gateOption("WithFailOpen", floodgate.WithFailOpen()) }

// WithDryRun decides, logs and calls the hook, but never refuses a call
// (see floodgate.WithDryRun): every call runs, and so carries the quota
// metadata only under WithQuotaOnAllowed, a call the limit would have
// denied included. It conflicts with WithFailOpen, which it implies.
func WithDryRun() Option { return gateOption("WithDryRun", floodgate.WithDryRun()) }

// WithCountCodes counts only the calls whose status code makes counts
// return true, e.g. only failed sign-ins:
//
//	grpclimit.WithCountCodes(func(c codes.Code) bool { return c == codes.Unauthenticated })
//
// It is floodgate.WithCountStatus for gRPC, with the same guarantees: the
// call's cost is reserved before the handler runs (the call is denied if
// the quota cannot hold it), and given back after the handler if its code
// does not count, so no more calls than the quota holds are ever in
// flight. A handler that panics is counted, whatever it would have
// returned; the panic goes on up. A stream is settled when its handler
// returns. Every policy's limiter must implement floodgate.Refunder.
func WithCountCodes(counts func(codes.Code) bool) Option {
	return func(c *config) error {
		if counts == nil {
			return fmt.Errorf("%w: nil code predicate", floodgate.ErrInvalidOption)
		}
		c.counts = counts
		c.gate = append(c.gate, floodgate.WithRefundUncounted())
		return c.once("WithCountCodes")
	}
}

// WithWait holds a call the limit would deny until its turn, when that
// comes within w.MaxWait, instead of refusing it, as floodgate.WithWait
// does for HTTP; beyond w's bounds, or when the call's deadline comes
// before its turn, the call is refused at once. A caller that cancels
// while waiting gives its turn back. Every policy's limiter must
// implement floodgate.Reserver.
func WithWait(w floodgate.WaitLimits) Option { return gateOption("WithWait", floodgate.WithWait(w)) }

// WithGateStats makes the interceptors' admission cores report to s, for
// metrics: the calls they hold for their turn (WithWait), as
// floodgate.WithGateStats does for HTTP; a route table's gates add up.
func WithGateStats(s *floodgate.GateStats) Option {
	return gateOption("WithGateStats", floodgate.WithGateStats(s))
}

// WithWaitTimer sets the timer waiting calls sleep on, for tests (see
// floodgate.WithWaitTimer); it requires WithWait.
func WithWaitTimer(after func(time.Duration) (<-chan time.Time, func() bool)) Option {
	return gateOption("WithWaitTimer", floodgate.WithWaitTimer(after))
}

func newConfig(opts []Option) (*config, error) {
	c := &config{given: map[string]bool{}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", floodgate.ErrInvalidOption)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.given["WithDryRun"] && c.given["WithFailOpen"] {
		return nil, fmt.Errorf("%w: WithFailOpen has no effect in dry-run, which never refuses", floodgate.ErrInvalidOption)
	}
	if c.quotaOnAllowed && c.given["WithHeaders"] && c.headers == floodgate.HeadersNone {
		return nil, fmt.Errorf("%w: WithQuotaOnAllowed has no effect with WithHeaders(HeadersNone), which sends no quota", floodgate.ErrInvalidOption)
	}
	return c, nil
}

// selectorOnly refuses the options a selector's policies replace.
func (c *config) selectorOnly() error {
	if c.given["WithKeyFunc"] || c.given["WithPolicyName"] {
		return fmt.Errorf("%w: WithKeyFunc and WithPolicyName do not apply to a policy selector; set them on each Policy", floodgate.ErrInvalidOption)
	}
	return nil
}
