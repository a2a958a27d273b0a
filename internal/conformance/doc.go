// Package conformance holds one table of outcome cases that every
// transport adapter of floodgate must pass alike: allowed, denied, the
// client's own error, the limiter failing under fail-closed and
// fail-open, a client hanging up during the decision, counting only
// failures with a panicking handler, and the admission kinds beyond a
// rate — in-flight slots released however a call ends, a service-wide cap
// answered as a busy service, the cost known after the response charged
// into debt, waiting for a turn and giving it back on a hang-up.
//
// A transport plugs in with a Driver: it serves a Setup (a limiter, an
// error policy, whether only failures count, whether the cost comes after
// the call, the bounds of waiting, a decision hook) behind its adapter, in
// front of a handler that does what each call asks (succeed, fail, panic,
// report a cost), and returns a Client that makes calls over the real
// transport and reports what the client saw, in the table's own terms
// (Answer). Run runs every case through a driver with in-memory limiters;
// RunStore with the limiters of another Store (redisstore's tests run it
// on Redis).
//
// The net/http and gin drivers live beside their adapters' tests; the
// HTTP ones share HTTPAct, HTTPClient, HTTPKey and HTTPOptions from here.
// A driver of another transport (gRPC, connect) maps its own answers:
// ResourceExhausted is Denied, InvalidArgument a ClientError, Unavailable
// Unavailable — or Overloaded when it carries a RetryInfo — and so on.
//
// It is an internal package of the root module so that the nested
// modules' tests can import it (see RELEASING.md on the pinning).
package conformance
