// Command server is floodgate's example service with Prometheus metrics:
// the routes and in-memory limits of examples/server in the floodgate
// module, and a second listener that serves /metrics.
//
//	go run ./examples/server [-addr :8080] [-metrics-addr 127.0.0.1:9090] [-trusted-proxy 10.0.0.0/8]
//
// Routes and limits:
//
//	GET  /auth/available/user_id?userId=…  10 per 10 minutes per client IP (policy user_id_probe),
//	                                        100 per network, an IPv6 /48 (policy user_id_probe_net)
//	POST /signup {"nickname":"…"}          5 per minute per nickname pattern (policy nickname),
//	                                        else 20 per minute per client IP (policy signup_ip),
//	                                        within 30 per hour per client IP (policy signup_ip_ceiling)
//	                                        and 300 per hour per network (policy signup_net_ceiling)
//	POST /rewards/claim {"accountId":"…"}  1 per day per account (policy reward_account), within
//	                                        30 per hour per client IP (policy reward_ip) and
//	                                        300 per hour per network (policy reward_net)
//	GET  /healthz                           not limited
//
// GET /metrics on -metrics-addr answers in the Prometheus text format:
// floodgate_decisions_total by policy and outcome, from every limit's
// decision hook (every policy's series at 0 from the start), and the
// keys, bound and evictions of each limiter's store (floodgate_store_*,
// limiter names probe, probe-net, signup-ceiling, signup-net,
// signup-nickname, signup-ip, reward-ip, reward-net, reward-account),
// with the Go runtime's and the process's
// metrics. It listens on loopback by default: metrics are for the
// operator, not for the clients of -addr. The in-memory limiters' latency
// is not recorded, since timing them would cost as much as deciding (see
// prommetrics.Metrics.Limiter). The server stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/prommetrics"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	exampleapp.Main(func(ctx context.Context, args []string, logOut io.Writer, _ func(string)) error {
		return run(ctx, args, logOut, nil)
	})
}

// run serves the service on -addr and the metrics on -metrics-addr until
// ctx is done, then shuts both down. ready, if not nil, is told both
// addresses once both listen (tests listen on port 0).
func run(ctx context.Context, args []string, logOut io.Writer, ready func(app, metrics string)) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logOut)
	addr := fs.String("addr", ":8080", "address to listen on")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9090", "address to serve /metrics on")
	trusted := fs.String("trusted-proxy", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *metricsAddr == "" {
		return errors.New("-metrics-addr: empty")
	}
	proxies, err := exampleapp.ParsePrefixes(*trusted)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))
	// Every policy's series exist at 0 from the first scrape, so that
	// increase() and rate() count the first requests.
	m, err := prommetrics.New(prommetrics.WithPolicies(exampleapp.PolicyNames()...))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	handler, err := newServer(exampleapp.Config{TrustedProxies: proxies, Logger: logger}, m)
	if err != nil {
		return err
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError),
	}))

	// Both servers stop together: on ctx, or when either fails.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu                    sync.Mutex
		appAddr, metricsReady string
	)
	tell := func(app, metrics string) {
		mu.Lock()
		defer mu.Unlock()
		if app != "" {
			appAddr = app
		}
		if metrics != "" {
			metricsReady = metrics
		}
		if ready != nil && appAddr != "" && metricsReady != "" {
			ready(appAddr, metricsReady)
		}
	}
	errc := make(chan error, 2)
	go func() {
		errc <- exampleapp.Serve(ctx, *addr, handler, logger, func(a string) { tell(a, "") },
			slog.Any("trusted_proxies", proxies))
		cancel()
	}()
	go func() {
		errc <- exampleapp.Serve(ctx, *metricsAddr, metricsMux, logger, func(a string) { tell("", a) },
			slog.String("serves", "/metrics"))
		cancel()
	}()
	return errors.Join(<-errc, <-errc)
}

// newServer returns the example's handler on in-memory limiters, each
// watched by m under its name, with m's hook on every limit.
func newServer(cfg exampleapp.Config, m *prommetrics.Metrics) (http.Handler, error) {
	var opts []floodgate.Option
	if cfg.Clock != nil {
		opts = append(opts, floodgate.WithClock(cfg.Clock))
	}
	cfg.DecisionHook = m.Hook()
	return exampleapp.New(cfg, exampleapp.Limiters{
		TokenBucket: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewTokenBucket(r, opts...)
			if err != nil {
				return nil, err
			}
			return l, m.Watch(name, l)
		},
		SlidingLog: func(name string, r floodgate.Rate) (floodgate.Limiter, error) {
			l, err := floodgate.NewSlidingLog(r, opts...)
			if err != nil {
				return nil, err
			}
			return l, m.Watch(name, l)
		},
	})
}
