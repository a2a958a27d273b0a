package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/floodgate-go/floodgate/redisstore"
)

// config is what newServer needs; tests fill in a fake clock.
type config struct {
	// Redis runs the limiters' scripts.
	Redis redisstore.Scripter
	// Prefix starts every Redis key of this service; each limit adds its
	// own name to it.
	Prefix string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed. Empty: the TCP peer is the client.
	TrustedProxies []netip.Prefix
	// Logger receives denials, errors and sign-ups.
	Logger *slog.Logger
	// Clock replaces the server's TIME in the Redis limiters, the system
	// clock in their in-memory fallbacks and in the middleware. Nil: real
	// clocks.
	Clock func() time.Time
}

// denyCacheKeys bounds each limiter's local deny cache.
const denyCacheKeys = 10000

// limiters builds the Redis limiters of one service instance. Each has an
// in-memory fallback of the same rate, which answers while Redis is down:
// per instance, so during an outage a client may get the quota once per
// instance. Each has a deny cache, so a flooding client costs Redis one
// call per RetryAfter.
type limiters struct {
	cfg config
}

func (l limiters) opts(name string, mem floodgate.Limiter) []redisstore.Option {
	o := []redisstore.Option{
		redisstore.WithPrefix(l.cfg.Prefix + ":" + name),
		redisstore.WithFallback(mem),
		redisstore.WithDenyCache(denyCacheKeys),
	}
	if l.cfg.Clock != nil {
		o = append(o, redisstore.WithClock(l.cfg.Clock))
	}
	return o
}

func (l limiters) memOpts() []floodgate.Option {
	if l.cfg.Clock != nil {
		return []floodgate.Option{floodgate.WithClock(l.cfg.Clock)}
	}
	return nil
}

func (l limiters) tokenBucket(name string, r floodgate.Rate) (floodgate.Limiter, error) {
	mem, err := floodgate.NewTokenBucket(r, l.memOpts()...)
	if err != nil {
		return nil, err
	}
	return redisstore.NewTokenBucket(l.cfg.Redis, r, l.opts(name, mem)...)
}

func (l limiters) slidingLog(name string, r floodgate.Rate) (floodgate.Limiter, error) {
	mem, err := floodgate.NewSlidingLog(r, l.memOpts()...)
	if err != nil {
		return nil, err
	}
	return redisstore.NewSlidingLog(l.cfg.Redis, r, l.opts(name, mem)...)
}

// newServer returns the example's handler: the routes and limits of
// package exampleapp, on Redis.
func newServer(cfg config) (http.Handler, error) {
	if cfg.Redis == nil {
		return nil, errors.New("server: no Redis")
	}
	lims := limiters{cfg}
	return exampleapp.New(exampleapp.Config{TrustedProxies: cfg.TrustedProxies, Logger: cfg.Logger, Clock: cfg.Clock},
		exampleapp.Limiters{TokenBucket: lims.tokenBucket, SlidingLog: lims.slidingLog})
}
