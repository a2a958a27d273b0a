package benchmarks

import (
	"net/http"
	"testing"
)

// TestPeersDecide checks the configuration every case relies on: under
// allowQuota each library allows a run of decisions on a few keys; under
// denyQuota it allows the first decision on a key and denies the next,
// both through its decision API and through its middleware. A library
// that did not would fail its benchmark, not win it.
func TestPeersDecide(t *testing.T) {
	for _, p := range peers() {
		t.Run(p.name, func(t *testing.T) {
			call := build(t, p, allowQuota).newCaller()
			for i := 0; i < 1000; i++ {
				key := clientIP(i % 10)
				if ok, err := call(key); err != nil || !ok {
					t.Fatalf("allowQuota, decision %d on %s: allowed=%v err=%v, want allowed", i, key, ok, err)
				}
			}

			deny := build(t, p, denyQuota)
			call = deny.newCaller()
			for i, want := range []bool{true, false, false} {
				if ok, err := call(hotKey); err != nil || ok != want {
					t.Fatalf("denyQuota, decision %d: allowed=%v err=%v, want %v", i, ok, err, want)
				}
			}

			if deny.handler == nil {
				t.Skipf("%s: no HTTP middleware", p.name)
			}
			h, w, r := deny.handler(okHandler), newRecorder(), newProbe()
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
				r.RemoteAddr = "198.51.100.1:40000"
				w.reset()
				h.ServeHTTP(w, r)
				if got := w.status(); got != want {
					t.Fatalf("middleware under denyQuota, request %d: status %d, want %d", i, got, want)
				}
			}
		})
	}
}

// TestPeersMemoryQuota checks that under memQuota a key's first decision
// is allowed, as the memory case requires.
func TestPeersMemoryQuota(t *testing.T) {
	for _, p := range peers() {
		call := build(t, p, memQuota).newCaller()
		if ok, err := call(hotKey); err != nil || !ok {
			t.Errorf("%s: first decision under memQuota: allowed=%v err=%v, want allowed", p.name, ok, err)
		}
	}
}
