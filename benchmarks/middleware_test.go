package benchmarks

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkMiddleware times a full ServeHTTP through each library's HTTP
// middleware keyed by client IP: the allowed path over 100,000 populated
// client addresses, under a quota that never drains (allowQuota) and
// under one the clients spend (drainQuota, each client having spent a
// different amount: what a service sees), and the denied path (429) on
// one hot client.
func BenchmarkMiddleware(b *testing.B) {
	addrs := clientIPs(populatedKeys)
	for i := range addrs {
		addrs[i] += ":40000"
	}
	for _, p := range peers() {
		b.Run("allowed/"+p.name, func(b *testing.B) { benchMiddlewareAllowed(b, p, addrs, allowQuota) })
	}
	for _, p := range peers() {
		b.Run("allowed-draining/"+p.name, func(b *testing.B) { benchMiddlewareAllowed(b, p, addrs, drainQuota) })
	}
	for _, p := range peers() {
		b.Run("denied/"+p.name, func(b *testing.B) { benchMiddlewareDenied(b, p) })
	}
}

// serve sends r from addr through h and fails unless the status is want.
func serve(tb testing.TB, p peer, h http.Handler, w *recorder, r *http.Request, addr string, want int) {
	r.RemoteAddr = addr
	w.reset()
	h.ServeHTTP(w, r)
	if got := w.status(); got != want {
		tb.Fatalf("%s: request from %s: status %d, want %d", p.name, addr, got, want)
	}
}

func benchMiddlewareAllowed(b *testing.B, p peer, addrs []string, q quota) {
	inst, fresh := reuse(b, p, q)
	if inst.handler == nil {
		b.Skipf("%s: no HTTP middleware", p.name)
	}
	h, w, r := inst.handler(okHandler), newRecorder(), newProbe()
	if fresh {
		for i, a := range addrs {
			serve(b, p, h, w, r, a, http.StatusOK)
			if q == drainQuota && inst.spend != nil {
				if err := inst.spend(strings.TrimSuffix(a, ":40000"), i); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	cpu := startCPU(b)
	defer cpu.report(b)
	j := 0
	for i := 0; i < b.N; i++ {
		serve(b, p, h, w, r, addrs[j], http.StatusOK)
		if j++; j == len(addrs) {
			j = 0
		}
	}
}

func benchMiddlewareDenied(b *testing.B, p peer) {
	inst, fresh := reuse(b, p, denyQuota)
	if inst.handler == nil {
		b.Skipf("%s: no HTTP middleware", p.name)
	}
	const addr = hotKey + ":40000"
	h, w, r := inst.handler(okHandler), newRecorder(), newProbe()
	if fresh {
		serve(b, p, h, w, r, addr, http.StatusOK)
	}
	cpu := startCPU(b)
	defer cpu.report(b)
	for i := 0; i < b.N; i++ {
		serve(b, p, h, w, r, addr, http.StatusTooManyRequests)
	}
}
