//go:build !race

package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// TestAllowedUnaryDoesNotAllocate: the interceptor's own work on an
// allowed unary call allocates nothing once the quota values of the
// current second are formatted, its quota metadata included, in every
// header style (issue 20 §2). The key function here allocates nothing
// either, so what is counted is the interceptor's. (Not under the race
// detector, which allocates on its own.)
func TestAllowedUnaryDoesNotAllocate(t *testing.T) {
	constKey := func(grpclimit.Call) (string, error) { return "203.0.113.7", nil }
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/EmptyCall"}
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return nil, nil }
	for _, style := range []floodgate.HeaderStyle{floodgate.HeadersIETF, floodgate.HeadersBoth, floodgate.HeadersNone} {
		unary := must(grpclimit.New(bucket(t, floodgate.PerSecond(1<<24)), grpclimit.WithKeyFunc(constKey), grpclimit.WithHeaders(style))).Unary()
		if _, err := unary(ctx, nil, info, handler); err != nil { // format this second's values
			t.Fatal(err)
		}
		ran = 0
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := unary(ctx, nil, info, handler); err != nil {
				t.Fatal(err)
			}
		})
		if ran != 1001 { // AllocsPerRun runs it once more, to warm up
			t.Fatalf("style %d: the handler ran %d times, want 1001", style, ran)
		}
		if allocs != 0 {
			t.Errorf("style %d: %.1f allocations per allowed call, want 0", style, allocs)
		}
	}
}
