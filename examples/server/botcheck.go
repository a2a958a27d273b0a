package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/turnstile"
)

// signupTokenHeader carries the Turnstile token on POST /signup. The
// sign-up body is JSON, not the widget's form, so the page's script copies
// the token into this header.
const signupTokenHeader = "CF-Turnstile-Response"

// botCheckConfig is what the sign-up bot check verifies tokens with.
type botCheckConfig struct {
	Secret string // the widget's secret key (TURNSTILE_SECRET)
	// Hostnames are those of the pages that show the widget
	// (-turnstile-hostname): a token solved elsewhere is rejected. Required.
	Hostnames []string
	// Action, if set, is the widget's data-action on the sign-up page
	// (-turnstile-action): a token solved for another form is rejected.
	Action string
}

// newBotCheck returns the sign-up bot check: a Cloudflare Turnstile
// verification as bc says, for config.BotCheck, which puts it before the
// sign-up limits (the per-IP ceiling, then the nickname pattern) so that a
// request without a good token is refused (400, 403) before it uses up
// anyone's quota. A token solved on another hostname, or for another
// action when one is set, is rejected (403). While siteverify cannot be
// reached sign-ups fail closed (503). A secret Cloudflare refuses is
// logged, since every sign-up then fails.
//
// The visitor's IP sent to Cloudflare is resolved like the rate limits'
// client IP, through the same trusted proxies, but as a full address:
// the limits group IPv6 clients by /64, siteverify wants the address.
func newBotCheck(bc botCheckConfig, proxies []netip.Prefix, logger *slog.Logger, opts ...turnstile.Option) (func(http.Handler) http.Handler, error) {
	if len(bc.Hostnames) == 0 {
		return nil, errors.New("TURNSTILE_SECRET is set without -turnstile-hostname: name the hostnames of the sign-up page, or another site's tokens pass (example.com for Cloudflare's dummy keys)")
	}
	vopts := []turnstile.Option{turnstile.WithHostnames(bc.Hostnames...)}
	if bc.Action != "" {
		vopts = append(vopts, turnstile.WithAction(bc.Action))
	}
	v, err := turnstile.New(bc.Secret, append(vopts, opts...)...)
	if err != nil {
		return nil, err
	}
	ipOpts := []floodgate.IPOption{floodgate.WithIPv6Prefix(128)}
	if len(proxies) > 0 {
		ipOpts = append(ipOpts, floodgate.TrustProxies(proxies...), floodgate.FromXForwardedFor())
	}
	clientIP, err := floodgate.KeyByIP(ipOpts...)
	if err != nil {
		return nil, err
	}
	return turnstile.Middleware(v,
		turnstile.WithTokenHeader(signupTokenHeader),
		turnstile.WithRemoteIP(func(r *http.Request) string {
			ip, err := clientIP(r)
			if err != nil {
				return "" // remoteip is optional; the check itself still runs
			}
			return ip
		}),
		turnstile.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, status int, err error) {
			if errors.Is(err, turnstile.ErrMisconfigured) {
				logger.ErrorContext(r.Context(), "turnstile misconfigured", slog.String("error", err.Error()))
			}
			turnstile.WriteProblem(w, r, status, err)
		}),
	)
}
