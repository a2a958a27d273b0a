package exampleapp

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

// maxPatterns bounds the distinct route patterns of a policy file: a
// request's matches are one bit each of a uint64.
const maxPatterns = 64

// maxChains bounds the handler chains a dispatcher keeps, one per set of
// patterns that matched together; past it a chain is built per request
// (correct, only slower). A file of k patterns has at most 2^k sets, and
// in practice a few: patterns of different routes rarely match together.
const maxChains = 256

// routedMiddleware is a policy's (or the bot check's) middleware and the
// patterns, as bits of a dispatcher's, whose requests it limits.
type routedMiddleware struct {
	mw     func(http.Handler) http.Handler
	routes uint64
}

// dispatcher serves a policy set. Matching each policy's routes with its
// own WithOnly would ask a private ServeMux once per policy and per
// request; the dispatcher asks once per distinct pattern, and runs the
// request through the chain of exactly the policies that matched, in file
// order, behind the bot check if it matched. Chains are built once per
// set of matches and kept (copy on write: a request reads them without a
// lock).
type dispatcher struct {
	mux      http.Handler
	patterns map[string]int // pattern → bit, while building
	match    []func(*http.Request) bool
	policies []routedMiddleware
	botCheck routedMiddleware // mw nil: none

	mu     sync.Mutex // serializes additions to chains
	chains atomic.Pointer[map[uint64]http.Handler]
}

// routeMask returns the bits of routes, giving each new pattern its
// matcher (floodgate.MatchPattern, ServeMux's own rules).
func (d *dispatcher) routeMask(path string, routes []string) (uint64, error) {
	var mask uint64
	for i, p := range routes {
		bit, ok := d.patterns[p]
		if !ok {
			if len(d.match) == maxPatterns {
				return 0, fieldErr(fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("more than %d distinct route patterns in the file", maxPatterns))
			}
			m, err := floodgate.MatchPattern(p)
			if err != nil {
				return 0, causeErr(fmt.Sprintf("%s[%d]", path, i), err)
			}
			bit = len(d.match)
			d.patterns[p] = bit
			d.match = append(d.match, m)
		}
		mask |= 1 << bit
	}
	return mask, nil
}

// ServeHTTP runs r through the chain of the patterns it matches.
func (d *dispatcher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var mask uint64
	for bit, m := range d.match {
		if m(r) {
			mask |= 1 << bit
		}
	}
	if h, ok := (*d.chains.Load())[mask]; ok {
		h.ServeHTTP(w, r)
		return
	}
	d.chain(mask).ServeHTTP(w, r)
}

// chain builds the handler of the requests matching mask, and keeps it
// while there is room.
func (d *dispatcher) chain(mask uint64) http.Handler {
	h := d.mux
	for i := len(d.policies) - 1; i >= 0; i-- {
		if d.policies[i].routes&mask != 0 {
			h = d.policies[i].mw(h)
		}
	}
	if d.botCheck.mw != nil && d.botCheck.routes&mask != 0 {
		h = d.botCheck.mw(h)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.chains.Load()
	if _, ok := old[mask]; ok || len(old) >= maxChains {
		return h
	}
	next := make(map[uint64]http.Handler, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[mask] = h
	d.chains.Store(&next)
	return h
}
