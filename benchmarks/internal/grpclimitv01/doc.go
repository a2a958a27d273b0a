// Package grpclimitv01 is contrib/grpclimit as it was in v0.1, before
// the admission core: each call shown to the HTTP middleware as a fake
// *http.Request. It is kept, frozen, only so that BenchmarkTransport can
// measure the old interceptor beside the new one in the same run; it is
// not maintained and not for use.
package grpclimitv01
