//go:build !unix

package grpclimit_test

// processCPU is not available here: the cpu-ns/op figure is left out.
func processCPU() (int64, bool) { return 0, false }
