package floodgate_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkInFlight takes and releases a slot per call, in parallel, over
// 65,536 keys each entering and leaving the table every time (the cost of
// the table's one count), and over one key that always holds slots.
func BenchmarkInFlight(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	b.Run("keys-entering", func(b *testing.B) {
		l, err := floodgate.NewInFlight(4, floodgate.WithMaxKeys(len(keys)))
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := next.Add(1 << 12)
			for pb.Next() {
				k := keys[i%uint64(len(keys))]
				i++
				if d, _ := l.AllowN(ctx, k, 1); d.Allowed {
					_ = l.ReleaseN(ctx, k, 1, 0)
				}
			}
		})
	})
	b.Run("key-held", func(b *testing.B) {
		l, err := floodgate.NewInFlight(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = l.AllowN(ctx, "busy", 1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, _ := l.AllowN(ctx, "busy", 1); d.Allowed {
					_ = l.ReleaseN(ctx, "busy", 1, 0)
				}
			}
		})
	})
}
