//go:build unix

package interleave

import "syscall"

// processCPU returns the CPU time the process has used, user and system,
// in ns; -1 if it cannot be read.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
