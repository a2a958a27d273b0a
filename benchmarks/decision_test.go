package benchmarks

import (
	"sync/atomic"
	"testing"
)

// BenchmarkDecision times one decision through each library's own
// decision API, allowed every time: on one hot key, and over 100,000
// populated keys from one goroutine and from GOMAXPROCS goroutines.
func BenchmarkDecision(b *testing.B) {
	keys := clientIPs(populatedKeys)
	for _, p := range peers() {
		b.Run("hot/"+p.name, func(b *testing.B) { benchDecisionHot(b, p) })
	}
	for _, p := range peers() {
		b.Run("100k-serial/"+p.name, func(b *testing.B) { benchDecisionSerial(b, p, keys) })
	}
	for _, p := range peers() {
		b.Run("100k-parallel/"+p.name, func(b *testing.B) { benchDecisionParallel(b, p, keys) })
	}
}

func benchDecisionHot(b *testing.B, p peer) {
	inst, fresh := reuse(b, p, allowQuota)
	call := inst.newCaller()
	if fresh {
		populate(b, p, call, []string{hotKey})
	}
	cpu := startCPU(b)
	defer cpu.report(b)
	for i := 0; i < b.N; i++ {
		if ok, err := call(hotKey); err != nil || !ok {
			b.Fatalf("%s: decision %d on the hot key: allowed=%v err=%v, want allowed", p.name, i, ok, err)
		}
	}
}

func benchDecisionSerial(b *testing.B, p peer, keys []string) {
	inst, fresh := reuse(b, p, allowQuota)
	call := inst.newCaller()
	if fresh {
		populate(b, p, call, keys)
	}
	cpu := startCPU(b)
	defer cpu.report(b)
	j := 0
	for i := 0; i < b.N; i++ {
		if ok, err := call(keys[j]); err != nil || !ok {
			b.Fatalf("%s: decision %d on %q: allowed=%v err=%v, want allowed", p.name, i, keys[j], ok, err)
		}
		if j++; j == len(keys) {
			j = 0
		}
	}
}

func benchDecisionParallel(b *testing.B, p peer, keys []string) {
	inst, fresh := reuse(b, p, allowQuota)
	if fresh {
		populate(b, p, inst.newCaller(), keys)
	}
	var (
		started atomic.Int64
		failed  atomic.Bool
	)
	cpu := startCPU(b)
	defer cpu.report(b)
	b.RunParallel(func(pb *testing.PB) {
		call := inst.newCaller()
		// Start each goroutine far from the others in the key set, so
		// that they contend for shards no more than real clients would.
		j := int(started.Add(1)*7919) % len(keys)
		for pb.Next() {
			if ok, err := call(keys[j]); err != nil || !ok {
				if failed.CompareAndSwap(false, true) {
					b.Errorf("%s: decision on %q: allowed=%v err=%v, want allowed", p.name, keys[j], ok, err)
				}
				return
			}
			if j++; j == len(keys) {
				j = 0
			}
		}
	})
}
