package exampleapp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
)

// PolicyServer serves the example's routes under the limits of a policy
// file, and takes a new file while serving (Reload).
//
// A reload parses, validates and builds the whole new set of limits
// before anything changes; a file refused at any step leaves the running
// set untouched. The built set is then swapped in with one atomic store:
// a request reads the set once, when it arrives, and finishes on it, so
// no request is dropped or sees half of each. A policy of the same name,
// algorithm, key and routes keeps its limiter, so every key keeps its
// state; if only its rate (or burst) changed, the kept limiter takes the
// new rate (SetRate, KeepUsed: what a client spent stays spent) just
// before the swap, and decides under it from the next decision. A
// policy whose algorithm, key or routes changed gets a new limiter: its
// keys start fresh. The file's trusted proxies are not part of a key's
// shape: a key is still a client address.
//
// A PolicyServer is safe for concurrent use; reloads are serialized.
type PolicyServer struct {
	opts   PolicyOptions
	reload sync.Mutex // one reload at a time: each builds on the set before it
	cur    atomic.Pointer[policySet]
}

// NewPolicyServer returns a server of the limits of the policy file data.
func NewPolicyServer(data []byte, opts PolicyOptions) (*PolicyServer, error) {
	if opts.Logger == nil {
		return nil, errors.New("exampleapp: no logger")
	}
	s := &PolicyServer{opts: opts}
	if _, err := s.Reload(data); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeHTTP serves r under the current set of limits.
func (s *PolicyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.cur.Load().handler.ServeHTTP(w, r)
}

// Reload replaces the limits by those of the policy file data, or
// returns the error that refused it, the limits unchanged.
func (s *PolicyServer) Reload(data []byte) (ReloadReport, error) {
	pf, err := ParsePolicyFile(data)
	if err != nil {
		return ReloadReport{}, err
	}
	s.reload.Lock()
	defer s.reload.Unlock()
	set, changes, report, err := buildPolicySet(pf, s.opts, s.cur.Load())
	if err != nil {
		return ReloadReport{}, err
	}
	if err := applyChanges(changes); err != nil {
		return ReloadReport{}, err
	}
	s.cur.Store(set)
	return report, nil
}

// ReloadFile reloads the policy file at path and logs the outcome: the
// policies kept, changed, built and dropped, or the error that refused
// the file (the limits unchanged).
func (s *PolicyServer) ReloadFile(path string) error {
	data, err := ReadPolicyFile(path)
	var report ReloadReport
	if err == nil {
		report, err = s.Reload(data)
	}
	if err != nil {
		s.opts.Logger.Error("policy file refused, limits unchanged", slog.String("file", path), slog.String("error", err.Error()))
		return err
	}
	s.opts.Logger.Info("policies reloaded", slog.String("file", path),
		slog.Any("kept", report.Kept), slog.Any("changed", report.Changed),
		slog.Any("built", report.Built), slog.Any("dropped", report.Dropped))
	return nil
}

// ReadPolicyFile reads the policy file at path, at most
// MaxPolicyFileBytes of it.
func ReadPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}
