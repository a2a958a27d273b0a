// Package metricstest holds the test and benchmark code the metrics
// adapters share: the limiters and servers their tests drive, the request
// sequences whose counts each adapter checks through its own exporter, a
// map diff for the samples read back, and the benchmarks of the hook's
// overhead. Each adapter keeps its own assertions, in its own names.
package metricstest
