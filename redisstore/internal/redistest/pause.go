//go:build unix

package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Pause stops the server process with SIGSTOP, as a hung or swapped-out
// server would be: its port still accepts connections (the kernel queues
// them) but nothing is answered until Resume. It returns once the process
// is seen stopped, so no command sent afterwards can be answered before
// Resume. Stop and the cleanup of Start resume a paused server first.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: server not running")
	}
	if s.resume != nil {
		return errors.New("redistest: server already paused")
	}
	p := s.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.resume = func() error { return p.Signal(syscall.SIGCONT) }
	return waitState(p.Pid, true)
}

// Resume continues a server stopped by Pause, and returns once the process
// is seen running again.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resume == nil {
		return errors.New("redistest: server not paused")
	}
	if err := s.resume(); err != nil {
		return err
	}
	s.resume = nil
	return waitState(s.cmd.Process.Pid, false)
}

// waitState waits up to 5 s until the process state in /proc/pid/stat says
// stopped (T) or not. Without /proc (not Linux) it trusts the signal.
func waitState(pid int, stopped bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return fmt.Errorf("redistest: unreadable /proc/%d/stat", pid)
		}
		if (stat[i+2] == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: process %d state %q, want stopped=%v", pid, stat[i+2], stopped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
