// Package exampleapp is the service behind floodgate's example servers:
// examples/server, on the in-memory limiters, redisstore/examples/server,
// on Redis, and contrib/prommetrics/examples/server, in memory with
// Prometheus metrics. All run the same routes, limits, envelopes and error
// policies; they differ only in how a limiter is built, which each passes
// to New as Limiters, and in the decision hook (Config.DecisionHook).
// Serve runs the HTTP server with bounded timeouts and a graceful
// shutdown, and ParsePrefixes reads the -trusted-proxy flag every command
// takes.
//
// The package is internal: it is the examples' wiring, not an API. The
// Redis example, in its own module, may import it because the internal
// rule goes by import path, and that module is rooted under floodgate's;
// so may the metrics example.
package exampleapp
