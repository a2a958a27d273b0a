package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/contrib/grpclimit"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// must returns v, or panics on a construction error (a test's mistake).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// callFrom is a Call from addr carrying the metadata pairs md.
func callFrom(addr net.Addr, md ...string) grpclimit.Call {
	ctx := context.Background()
	if addr != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	return grpclimit.Call{Context: metadata.NewIncomingContext(ctx, metadata.Pairs(md...)), FullMethod: "/pkg.Svc/M"}
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// TestKeyByIPReadsThePeer: the key is the peer's address by KeyByIP's
// rules; forwarding metadata is believed from trusted proxies only, so a
// client forging x-forwarded-for gains no fresh key; a peer that is no IP
// address gets ErrNoClientIP, never a shared key.
func TestKeyByIPReadsThePeer(t *testing.T) {
	byPeer := must(grpclimit.KeyByIP())
	lb := netip.MustParsePrefix("10.0.0.0/8")
	viaProxy := must(grpclimit.KeyByIP(floodgate.TrustProxies(lb), floodgate.FromXForwardedFor()))
	viaUnix := must(grpclimit.KeyByIP(floodgate.TrustUnixSocket(), floodgate.FromHeader("X-Real-IP")))
	v6 := must(grpclimit.KeyByIP(floodgate.WithIPv6Prefix(48)))
	tests := []struct {
		name string
		key  grpclimit.KeyFunc
		call grpclimit.Call
		want string // "" for ErrNoClientIP
	}{
		{"IPv4 peer", byPeer, callFrom(tcp("203.0.113.7:5000")), "203.0.113.7"},
		{"IPv4-mapped peer", byPeer, callFrom(&net.TCPAddr{IP: net.ParseIP("::ffff:203.0.113.7"), Port: 1}), "203.0.113.7"},
		{"IPv6 peer, /64", byPeer, callFrom(tcp("[2001:db8:1:2:3::4]:5000")), "2001:db8:1:2::/64"},
		{"IPv6 peer, /48", v6, callFrom(tcp("[2001:db8:1:2:3::4]:5000")), "2001:db8:1::/48"},
		{"NAT64 peer", byPeer, callFrom(tcp("[64:ff9b::203.0.113.7]:5000")), "203.0.113.7"},
		{"forged x-forwarded-for, untrusted peer", byPeer, callFrom(tcp("203.0.113.7:5000"), "x-forwarded-for", "198.51.100.1"), "203.0.113.7"},
		{"forged x-forwarded-for, untrusted peer, trusting config", viaProxy, callFrom(tcp("203.0.113.7:5000"), "x-forwarded-for", "198.51.100.1"), "203.0.113.7"},
		{"trusted proxy", viaProxy, callFrom(tcp("10.1.1.1:5000"), "x-forwarded-for", "192.0.2.99, 198.51.100.1"), "198.51.100.1"},
		{"trusted proxy, forged left part", viaProxy, callFrom(tcp("10.1.1.1:5000"), "x-forwarded-for", "1.2.3.4", "x-forwarded-for", "198.51.100.1, 10.2.2.2"), "198.51.100.1"},
		{"trusted proxy, no header", viaProxy, callFrom(tcp("10.1.1.1:5000")), "10.1.1.1"},
		{"trusted proxy, garbage", viaProxy, callFrom(tcp("10.1.1.1:5000"), "x-forwarded-for", "nonsense"), ""},
		{"unix socket, untrusted", byPeer, callFrom(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}), ""},
		{"unix socket, trusted", viaUnix, callFrom(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, "x-real-ip", "198.51.100.3"), "198.51.100.3"},
		{"unix socket, trusted, no header", viaUnix, callFrom(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}), ""},
		{"no peer", byPeer, callFrom(nil), ""},
		{"non-IP peer (bufconn)", byPeer, callFrom(bufAddr{}), ""},
	}
	for _, tt := range tests {
		k, err := tt.key(tt.call)
		switch {
		case tt.want == "" && !errors.Is(err, floodgate.ErrNoClientIP):
			t.Errorf("%s: %q, %v; want ErrNoClientIP", tt.name, k, err)
		case tt.want != "" && (k != tt.want || err != nil):
			t.Errorf("%s: %q, %v; want %q", tt.name, k, err, tt.want)
		}
	}
}

type bufAddr struct{}

func (bufAddr) Network() string { return "bufconn" }
func (bufAddr) String() string  { return "bufconn" }

// TestKeyByMetadataMethodAndJoin: a metadata value (trimmed; repeated,
// the same value each time, or ErrAmbiguousKey), the full method, and a
// join whose components cannot forge a boundary.
func TestKeyByMetadataMethodAndJoin(t *testing.T) {
	apiKey := must(grpclimit.KeyByMetadata("X-API-Key")) // matched in lower case
	join := must(grpclimit.JoinKeys(apiKey, grpclimit.KeyByFullMethod()))
	for _, tt := range []struct {
		key  grpclimit.KeyFunc
		call grpclimit.Call
		want string
		err  error
	}{
		{apiKey, callFrom(nil, "x-api-key", " k1 "), "k1", nil},
		{apiKey, callFrom(nil, "x-api-key", "k1", "x-api-key", "k1\t"), "k1", nil},
		{apiKey, callFrom(nil, "x-api-key", "k1", "x-api-key", "k2"), "", floodgate.ErrAmbiguousKey},
		{apiKey, callFrom(nil, "x-api-key", "", "x-api-key", "k2"), "", floodgate.ErrAmbiguousKey},
		{apiKey, callFrom(nil, "x-api-key", "k1", "x-api-key", " "), "", floodgate.ErrAmbiguousKey},
		{apiKey, callFrom(nil, "x-api-key", " "), "", floodgate.ErrNoKey},
		{apiKey, callFrom(nil, "x-api-key", "", "x-api-key", ""), "", floodgate.ErrNoKey},
		{apiKey, callFrom(nil), "", floodgate.ErrNoKey},
		{grpclimit.KeyByFullMethod(), callFrom(nil), "/pkg.Svc/M", nil},
		{grpclimit.KeyByFullMethod(), grpclimit.Call{Context: context.Background()}, "", floodgate.ErrNoKey},
		{join, callFrom(nil, "x-api-key", "k1"), "2:k110:/pkg.Svc/M", nil},
		{join, callFrom(nil), "", floodgate.ErrNoKey},
		{join, callFrom(nil, "x-api-key", "k1", "x-api-key", "k2"), "", floodgate.ErrAmbiguousKey},
	} {
		k, err := tt.key(tt.call)
		if k != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("key %q, %v; want %q, %v", k, err, tt.want, tt.err)
		}
		if errors.Is(err, floodgate.ErrAmbiguousKey) && errors.Is(err, floodgate.ErrNoKey) {
			t.Errorf("%v also wraps ErrNoKey: a selector would fall back", err)
		}
	}
}

// TestKeysThroughARealServer: calls from one loopback client, keyed by
// a metadata value, the method, and both.
func TestKeysThroughARealServer(t *testing.T) {
	apiKey := must(grpclimit.KeyByMetadata("x-api-key"))
	perKeyMethod := must(grpclimit.JoinKeys(apiKey, grpclimit.KeyByFullMethod()))
	trusted := must(grpclimit.KeyByIP(floodgate.TrustProxies(netip.MustParsePrefix("127.0.0.1/32")), floodgate.FromXForwardedFor()))
	type call struct {
		md     []string
		method string // "empty" or "unary"
		code   codes.Code
	}
	xff := func(ip string) []string { return []string{"x-forwarded-for", "192.0.2.99, " + ip} }
	for name, tt := range map[string]struct {
		key   grpclimit.KeyFunc
		calls []call
	}{
		"trusted proxy": {trusted, []call{
			{xff("198.51.100.1"), "empty", codes.OK}, {xff("198.51.100.1"), "empty", codes.ResourceExhausted},
			{xff("198.51.100.2"), "empty", codes.OK}, {nil, "empty", codes.OK},
		}},
		"metadata": {apiKey, []call{
			{[]string{"x-api-key", "k1"}, "empty", codes.OK}, {[]string{"x-api-key", "k1"}, "empty", codes.ResourceExhausted},
			{[]string{"x-api-key", "k2"}, "empty", codes.OK}, {nil, "empty", codes.InvalidArgument},
		}},
		"key and method": {perKeyMethod, []call{
			{[]string{"x-api-key", "k1"}, "empty", codes.OK}, {[]string{"x-api-key", "k1"}, "unary", codes.OK},
			{[]string{"x-api-key", "k1"}, "empty", codes.ResourceExhausted}, {[]string{"x-api-key", "k2"}, "empty", codes.OK},
		}},
	} {
		ic := must(grpclimit.New(bucket(t, floodgate.Rate{Limit: 1, Period: time.Hour}, newClock().option()),
			grpclimit.WithKeyFunc(tt.key), grpclimit.WithFailOpen()))
		client, _ := serve(t, ic)
		for i, c := range tt.calls {
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), c.md...)
			var err error
			if c.method == "empty" {
				_, err = client.EmptyCall(ctx, &testpb.Empty{})
			} else {
				_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
			}
			if got := status.Code(err); got != c.code {
				t.Errorf("%s, call %d (%v %s): %v, want %v", name, i, c.md, c.method, err, c.code)
			}
		}
	}
}

// TestKeyTooLongUnderFailOpen: a key over the limiter's bound is the
// caller's doing: InvalidArgument, even under fail-open.
func TestKeyTooLongUnderFailOpen(t *testing.T) {
	ic := must(grpclimit.New(bucket(t, floodgate.PerMinute(10)),
		grpclimit.WithKeyFunc(must(grpclimit.KeyByMetadata("x-api-key"))), grpclimit.WithFailOpen()))
	client, svc := serve(t, ic)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-api-key", strings.Repeat("k", 2000))
	if _, err := client.EmptyCall(ctx, &testpb.Empty{}); status.Code(err) != codes.InvalidArgument || svc.empties.Load() != 0 {
		t.Errorf("%v, handler ran %d times; want InvalidArgument and no run", err, svc.empties.Load())
	}
}
