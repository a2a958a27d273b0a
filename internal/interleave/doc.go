// Package interleave measures what a way of serving a call adds to a
// bare one, as a benchmark that a shared machine cannot fool: the cases
// (a bare server, the same with an adapter, …) are called in turn, a
// batch of calls each per round, so that the load of the machine, which
// drifts over seconds, weighs on all of them alike; each round's CPU
// time per call of every case is set against the first case's in the
// same round, and the median of those differences is reported, with its
// quartiles, beside the allocations per call over the first case's
// (exact, and the same in every round).
//
// CPU time is the process's user and system time (client and server
// together when both run in the process): unlike wall time it does not
// count waiting for a core. Allocations are the process's heap objects,
// every goroutine's, so a case's figure is what a call costs end to
// end. Nothing else may run in the process meanwhile.
//
// Two ways to call: Run (Bench) makes a batch's calls one after the
// other, one client's latency-bound calls; RunSaturated (BenchSaturated)
// makes them from many goroutines at once, so that every core stays busy
// and no CPU time goes to the runtime's threads spinning for work
// between a call and its answer — the mode that resolves microseconds
// on an idle machine, where that spinning dominates a serial call.
//
// It is used by the adapter benchmarks of contrib/grpclimit,
// contrib/connectlimit and benchmarks; it is no part of the library.
package interleave
