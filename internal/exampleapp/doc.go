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
// The in-memory example can take its limits from a JSON policy file
// instead (docs/policy-file.md): ParsePolicyFile reads and validates one,
// naming the field at fault by its JSON path (FieldError), and a
// PolicyServer serves the service's routes under its limits and swaps in
// a new file's while serving (Reload), keeping each unchanged policy's
// limiter and with it every key's state.
//
// The package is internal: it is the examples' wiring, not an API. The
// Redis example, in its own module, may import it because the internal
// rule goes by import path, and that module is rooted under floodgate's;
// so may the metrics example.
package exampleapp
