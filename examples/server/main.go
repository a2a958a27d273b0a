// Command server is floodgate's example service: the two scenarios the
// library is built for, on the in-memory limiters.
//
//	go run ./examples/server [-addr :8080] [-trusted-proxy 10.0.0.0/8,192.0.2.1]
//	go run ./examples/server -policies examples/server/policies.json   # kill -HUP reloads it
//	TURNSTILE_SECRET=… go run ./examples/server -turnstile-hostname example.com [-turnstile-action signup]
//
// Routes and limits:
//
//	GET  /auth/available/user_id?userId=…  10 per 10 minutes per client IP (token bucket);
//	                                        denied with the service's BPLTE429 envelope
//	POST /signup {"nickname":"…"}          5 per minute per nickname pattern (abc1, abc2 → abc{NUM}),
//	                                        else 20 per minute per client IP (sliding log), and
//	                                        always within 30 per hour per client IP (sliding log);
//	                                        denied with application/problem+json
//	POST /rewards/claim {"accountId":"…"}  1 per day per account (token bucket), within
//	                                        30 per hour per client IP (sliding log)
//	GET  /healthz                           not limited
//
// When TURNSTILE_SECRET is set, POST /signup first requires a Cloudflare
// Turnstile token in the CF-Turnstile-Response header, verified with that
// secret, and only then counts against the sign-up limits: bots
// are refused (400 no token, 403 rejected, 503 while Cloudflare cannot be
// reached) before they use up anyone's quota. -turnstile-hostname is then
// required: the hostnames (comma-separated) of the pages that show the
// widget, so that a token solved on another site that embeds the sitekey
// is rejected; -turnstile-action, the widget's data-action on the sign-up
// page, rejects a token solved for another form. To try it without a
// real site, Cloudflare's dummy secret 1x0000000000000000000000000000000AA
// accepts any token, for the hostname example.com and no action (2x…AA
// rejects every one, 3x…AA answers "already spent"; the dummy sitekey
// 1x00000000000000000000AA gives the page the token
// XXXX.DUMMY.TOKEN.XXXX); see package turnstile for all the keys.
//
// With -policies, the limits below are replaced by those of a JSON policy
// file (routes, keys, rates, header style, trusted proxies, bot check;
// see docs/policy-file.md and policies.json here, which holds the same
// limits), and SIGHUP reloads it while serving: a file that does not
// validate is logged and refused, the running limits unchanged; a policy
// whose rate did not change keeps every key's state.
//
// The client IP is the TCP peer unless the peer is one of the
// -trusted-proxy CIDRs; then it is the right-most untrusted address of
// X-Forwarded-For. Logs are JSON lines (log/slog) on standard error. The
// server stops on SIGINT or SIGTERM, giving requests in flight up to
// 10 seconds.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

func main() { exampleapp.Main(run) }

// run serves until ctx is done, then shuts down gracefully. ready, if not
// nil, is told the address listened on (tests listen on port 0). SIGHUP
// reloads the policy file.
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serve(ctx, args, logOut, ready, hup)
}

// flags are the server's command-line flags.
type flags struct {
	addr, trusted, hostnames, action, policies string
	set                                        map[string]bool // the flags given
}

func parseFlags(args []string, logOut io.Writer) (flags, error) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logOut)
	var f flags
	fs.StringVar(&f.addr, "addr", ":8080", "address to listen on")
	fs.StringVar(&f.trusted, "trusted-proxy", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed")
	fs.StringVar(&f.hostnames, "turnstile-hostname", "", "with TURNSTILE_SECRET, required: comma-separated hostnames of the pages that show the Turnstile widget")
	fs.StringVar(&f.action, "turnstile-action", "", "with TURNSTILE_SECRET: the widget's data-action on the sign-up page, if it sets one")
	fs.StringVar(&f.policies, "policies", "", "JSON policy file (routes, keys, rates, header style, trusted proxies, bot check); SIGHUP reloads it. Unset: the built-in limits")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// serve is run with the hang-up signals on a channel, so that tests can
// send their own.
func serve(ctx context.Context, args []string, logOut io.Writer, ready func(addr string), hup <-chan os.Signal) error {
	f, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))
	if f.policies != "" {
		return serveFile(ctx, f, logger, ready, hup)
	}
	proxies, err := exampleapp.ParsePrefixes(f.trusted)
	if err != nil {
		return err
	}
	cfg := config{TrustedProxies: proxies, Logger: logger}
	if secret := os.Getenv("TURNSTILE_SECRET"); secret != "" {
		bc := botCheckConfig{Secret: secret, Hostnames: splitList(f.hostnames), Action: f.action}
		if cfg.BotCheck, err = newBotCheck(bc, proxies, logger); err != nil {
			return err
		}
	}
	handler, err := newServer(cfg)
	if err != nil {
		return err
	}
	stop := onHangup(hup, func() { logger.Warn("SIGHUP ignored: the built-in limits have no file to reload (see -policies)") })
	defer stop()
	return exampleapp.Serve(ctx, f.addr, handler, logger, ready,
		slog.Any("trusted_proxies", proxies), slog.Bool("turnstile", cfg.BotCheck != nil))
}

// serveFile serves the limits of the policy file f.policies, reloading
// it on every hang-up.
func serveFile(ctx context.Context, f flags, logger *slog.Logger, ready func(addr string), hup <-chan os.Signal) error {
	for _, name := range []string{"trusted-proxy", "turnstile-hostname", "turnstile-action"} {
		if f.set[name] {
			return fmt.Errorf("-%s and -policies: set it in the policy file (see docs/policy-file.md), where a reload can change it", name)
		}
	}
	data, err := exampleapp.ReadPolicyFile(f.policies)
	if err != nil {
		return err
	}
	ps, err := exampleapp.NewPolicyServer(data, policyOptions(logger, os.Getenv("TURNSTILE_SECRET")))
	if err != nil {
		return fmt.Errorf("%s: %w", f.policies, err)
	}
	stop := onHangup(hup, func() { _ = ps.ReloadFile(f.policies) })
	defer stop()
	return exampleapp.Serve(ctx, f.addr, ps, logger, ready, slog.String("policies", f.policies))
}

// policyOptions returns how a policy file's limits are built: in memory,
// with a Turnstile bot check if secret is set (and then required).
func policyOptions(logger *slog.Logger, secret string) exampleapp.PolicyOptions {
	opts := exampleapp.PolicyOptions{Logger: logger}
	if secret == "" {
		return opts
	}
	opts.RequireBotCheck = true
	opts.BotCheck = func(spec exampleapp.BotCheckSpec, proxies []netip.Prefix) (func(http.Handler) http.Handler, error) {
		return newBotCheck(botCheckConfig{Secret: secret, Hostnames: spec.Hostnames, Action: spec.Action}, proxies, logger)
	}
	return opts
}

// onHangup calls do for every signal on hup, one at a time, until the
// returned stop is called.
func onHangup(hup <-chan os.Signal, do func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-hup:
				do()
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var items []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}
