// Package exampleapp is the service behind floodgate's two example
// servers: examples/server, on the in-memory limiters, and
// redisstore/examples/server, on Redis. Both run the same routes, limits,
// envelopes and error policies; they differ only in how a limiter is
// built, which each passes to New as Limiters. Serve runs the HTTP server
// with bounded timeouts and a graceful shutdown, and ParsePrefixes reads
// the -trusted-proxy flag both commands take.
//
// The package is internal: it is the examples' wiring, not an API. The
// Redis example, in its own module, may import it because the internal
// rule goes by import path, and that module is rooted under floodgate's.
package exampleapp
