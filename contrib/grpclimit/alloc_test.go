//go:build !race

package grpclimit_test

import (
	"context"
	"net"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"github.com/floodgate-go/floodgate/internal/interleave"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// TestAllowedUnaryAllocations: the interceptor's own work on an allowed
// unary call allocates nothing by default, under a quota that never
// drains and under one the calls spend (whose values change on every
// call), in every header style; with WithQuotaOnAllowed it allocates the
// metadata map the call sends (2 allocations: a map a call, since under
// a spending quota no two calls send the same values) and a share of a
// block of formatted values, nothing more (issue 31). The key function
// here allocates nothing, so what is counted is the interceptor's. (Not
// under the race detector, which allocates on its own.)
func TestAllowedUnaryAllocations(t *testing.T) {
	constKey := func(grpclimit.Call) (string, error) { return "203.0.113.7", nil }
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5000}})
	stream := &sendingStream{}
	ctx = grpc.NewContextWithServerTransportStream(ctx, stream)
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/EmptyCall"}
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return nil, nil }
	for _, q := range benchQuotas {
		for _, tt := range []struct {
			style     floodgate.HeaderStyle
			onAllowed bool
			max       float64
		}{
			{floodgate.HeadersIETF, false, 0},
			{floodgate.HeadersBoth, false, 0},
			{floodgate.HeadersNone, false, 0},
			{floodgate.HeadersIETF, true, 2.1},
			{floodgate.HeadersBoth, true, 2.2},
		} {
			opts := []grpclimit.Option{grpclimit.WithKeyFunc(constKey), grpclimit.WithHeaders(tt.style)}
			if tt.onAllowed {
				opts = append(opts, grpclimit.WithQuotaOnAllowed())
			}
			unary := must(grpclimit.New(bucket(t, q.Rate), opts...)).Unary()
			ran, stream.sent = 0, 0
			allocs := interleave.MallocsPerRun(1000, func() {
				if _, err := unary(ctx, nil, info, handler); err != nil {
					t.Fatal(err)
				}
			})
			if ran != 1001 { // MallocsPerRun runs it once more, to warm up
				t.Fatalf("%s quota, style %d: the handler ran %d times, want 1001", q.Name, tt.style, ran)
			}
			if want := 1001 * btoi(tt.onAllowed); stream.sent != want {
				t.Errorf("%s quota, style %d, quota on allowed %v: %d headers sent, want %d", q.Name, tt.style, tt.onAllowed, stream.sent, want)
			}
			// A few allocations in a thousand calls are not the call's (the
			// store's first use of a shard, the runtime): 0.005 of slack.
			if allocs > tt.max+0.005 {
				t.Errorf("%s quota, style %d, quota on allowed %v: %.4f allocations per allowed call, want at most %.1f", q.Name, tt.style, tt.onAllowed, allocs, tt.max)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sendingStream is a transport stream that counts the headers sent with
// quota metadata.
type sendingStream struct{ sent int }

func (*sendingStream) Method() string { return "/grpc.testing.TestService/EmptyCall" }
func (s *sendingStream) SendHeader(md metadata.MD) error {
	if len(md.Get("ratelimit-policy")) > 0 || len(md.Get("x-ratelimit-limit")) > 0 {
		s.sent++
	}
	return nil
}
func (*sendingStream) SetHeader(metadata.MD) error  { return nil }
func (*sendingStream) SetTrailer(metadata.MD) error { return nil }
