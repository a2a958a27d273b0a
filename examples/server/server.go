package main

import (
	"net/http"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/exampleapp"
)

// config is what newServer needs: the shared service's configuration,
// whose Clock also drives the in-memory limiters here. Tests fill in a
// fake clock.
type config = exampleapp.Config

// newServer returns the example's handler: the routes and limits of
// package exampleapp, on in-memory limiters.
func newServer(cfg config) (http.Handler, error) {
	var opts []floodgate.Option
	if cfg.Clock != nil {
		opts = append(opts, floodgate.WithClock(cfg.Clock))
	}
	return exampleapp.New(cfg, exampleapp.Limiters{
		TokenBucket: func(_ string, r floodgate.Rate) (floodgate.Limiter, error) {
			return floodgate.NewTokenBucket(r, opts...)
		},
		SlidingLog: func(_ string, r floodgate.Rate) (floodgate.Limiter, error) {
			return floodgate.NewSlidingLog(r, opts...)
		},
	})
}
