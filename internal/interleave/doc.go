// Package interleave measures what a way of serving a call adds to a
// bare one, as a benchmark that a shared machine cannot fool: the cases
// (a bare server, the same with an adapter, …) are called in turn, a
// batch of calls each per round, so that the load of the machine, which
// drifts over seconds, weighs on all of them alike; each round's CPU
// time per call of every case is set against the first case's in the
// same round, and the median of those differences is reported, beside
// the allocations per call over the first case's (exact, and the same in
// every round).
//
// CPU time is the process's user and system time (client and server
// together when both run in the process): unlike wall time it does not
// count waiting for a core. Allocations are the process's heap objects,
// every goroutine's, so a case's figure is what a call costs end to
// end. Nothing else may run in the process meanwhile.
//
// It is used by the adapter benchmarks of contrib/grpclimit,
// contrib/connectlimit and benchmarks; it is no part of the library.
package interleave
