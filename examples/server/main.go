// Command server is floodgate's example service: the two scenarios the
// library is built for, on the in-memory limiters.
//
//	go run ./examples/server [-addr :8080] [-trusted-proxy 10.0.0.0/8,192.0.2.1]
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
// The client IP is the TCP peer unless the peer is one of the
// -trusted-proxy CIDRs; then it is the right-most untrusted address of
// X-Forwarded-For. Logs are JSON lines (log/slog) on standard error. The
// server stops on SIGINT or SIGTERM, giving requests in flight up to
// 10 seconds.
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

func main() { exampleapp.Main(run) }

// run serves until ctx is done, then shuts down gracefully. ready, if not
// nil, is told the address listened on (tests listen on port 0).
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logOut)
	addr := fs.String("addr", ":8080", "address to listen on")
	trusted := fs.String("trusted-proxy", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed")
	hostnames := fs.String("turnstile-hostname", "", "with TURNSTILE_SECRET, required: comma-separated hostnames of the pages that show the Turnstile widget")
	action := fs.String("turnstile-action", "", "with TURNSTILE_SECRET: the widget's data-action on the sign-up page, if it sets one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	proxies, err := exampleapp.ParsePrefixes(*trusted)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))
	cfg := config{TrustedProxies: proxies, Logger: logger}
	if secret := os.Getenv("TURNSTILE_SECRET"); secret != "" {
		bc := botCheckConfig{Secret: secret, Hostnames: splitList(*hostnames), Action: *action}
		if cfg.BotCheck, err = newBotCheck(bc, proxies, logger); err != nil {
			return err
		}
	}
	handler, err := newServer(cfg)
	if err != nil {
		return err
	}
	return exampleapp.Serve(ctx, *addr, handler, logger, ready,
		slog.Any("trusted_proxies", proxies), slog.Bool("turnstile", cfg.BotCheck != nil))
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
