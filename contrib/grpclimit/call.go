package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/headerval"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Call is a gRPC call as grpclimit's key functions see it: its context,
// which carries the peer and the incoming metadata, and its full method,
// "/package.Service/Method". It is passed by value.
type Call struct {
	// Context is the call's context, as the server hands it to the
	// interceptor: peer.FromContext and metadata.FromIncomingContext read
	// it.
	Context context.Context
	// FullMethod is the method called, "/package.Service/Method".
	FullMethod string
}

// Peer returns the address of the call's peer (the TCP connection's remote
// end, a unix socket, …), or nil when the context carries none.
func (c Call) Peer() net.Addr {
	if p, ok := peer.FromContext(c.Context); ok {
		return p.Addr
	}
	return nil
}

// Metadata returns the values of the incoming metadata key (lower case,
// as gRPC sends it), or nil. It copies only the values of that key, where
// metadata.FromIncomingContext copies the whole map.
func (c Call) Metadata(key string) []string {
	return metadata.ValueFromIncomingContext(c.Context, key)
}

// KeyFunc returns the key a call is limited by. An error wrapping
// floodgate.ErrNoKey means the call does not carry what the function
// needs: a policy selector then tries its next policy, and a call no
// policy applies to is refused with codes.InvalidArgument, under every
// error policy. It is the Key of a floodgate.PolicyFor[Call].
type KeyFunc func(Call) (string, error)

// Policy is a named limit over gRPC calls: a Limiter and the KeyFunc that
// keys a call for it. NewPolicy takes a selector over policies.
type Policy = floodgate.PolicyFor[Call]

// KeyByIP returns a KeyFunc that keys a call by its client's IP address,
// with the rules of floodgate.KeyByIP for the same options: without
// options the peer's address only, so that no client can choose its own
// key; behind a proxy, name the proxies with floodgate.TrustProxies and
// the metadata the proxy sets with a source option
// (floodgate.FromXForwardedFor reads x-forwarded-for,
// floodgate.FromHeader("X-Real-IP") x-real-ip, floodgate.FromForwarded
// forwarded), which is then believed from those peers only. A peer that
// is no IP address (bufconn, a unix socket without
// floodgate.TrustUnixSocket) gets an error wrapping
// floodgate.ErrNoClientIP, never a shared key. The options are checked as
// floodgate.KeyByIP checks them.
func KeyByIP(opts ...floodgate.IPOption) (KeyFunc, error) {
	res, err := floodgate.NewIPResolver(opts...)
	if err != nil {
		return nil, err
	}
	header := strings.ToLower(res.Header()) // metadata keys are lower case
	return func(c Call) (string, error) {
		p, err := peerText(c.Context)
		if err != nil {
			return "", err
		}
		var forwarded []string
		if header != "" {
			forwarded = metadata.ValueFromIncomingContext(c.Context, header)
		}
		return res.Key(p, forwarded)
	}, nil
}

// peerText writes the call's peer as http.Request.RemoteAddr would, for
// floodgate.IPResolver: an IP address without its port (which the key
// leaves out anyway), or "@" for a unix socket.
func peerText(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("%w: the call carries no peer", floodgate.ErrNoClientIP)
	}
	switch a := p.Addr.(type) {
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			return "", fmt.Errorf("%w: peer %v", floodgate.ErrNoClientIP, a)
		}
		// Formatted in a stack buffer: for a dotted-quad client the
		// resulting string is also the key, the call's one allocation.
		var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")]byte
		return string(ip.Unmap().AppendTo(buf[:0])), nil
	case *net.UnixAddr:
		return "@", nil
	}
	// Anything else (bufconn, a custom listener) is parsed as an address,
	// and refused if it is none.
	return p.Addr.String(), nil
}

// KeyByMetadata returns a KeyFunc that keys a call by the value of the
// incoming metadata key, trimmed of white space, as floodgate.KeyByHeader
// reads a header. A key given several values must give the same one in
// each: values that differ (an empty one beside another included) yield
// floodgate.ErrAmbiguousKey, codes.InvalidArgument under every error
// policy, since a handler reading another value than the first (the
// last, the first non-empty one) would act on another value than the one
// counted. A missing or empty value yields floodgate.ErrNoKey. The key is
// matched in lower case, as gRPC sends metadata keys; one that is not an
// HTTP token, or a binary key (ending in "-bin"), is an error wrapping
// floodgate.ErrInvalidOption.
func KeyByMetadata(key string) (KeyFunc, error) {
	k := strings.ToLower(key)
	if !validMetadataKey(k) {
		return nil, fmt.Errorf("%w: KeyByMetadata: metadata key %q is not a text metadata key: pass a key such as \"x-api-key\"", floodgate.ErrInvalidOption, key)
	}
	return func(c Call) (string, error) {
		vs := metadata.ValueFromIncomingContext(c.Context, k)
		v, ok := headerval.One(vs)
		switch {
		case !ok:
			return "", fmt.Errorf("%w: metadata %s is given %d values that differ", floodgate.ErrAmbiguousKey, k, len(vs))
		case v == "":
			return "", fmt.Errorf("%w: metadata %s is missing or empty", floodgate.ErrNoKey, k)
		}
		return v, nil
	}, nil
}

// validMetadataKey reports a lower-case HTTP token that is not a binary
// or a pseudo-header key.
func validMetadataKey(k string) bool {
	if k == "" || strings.HasSuffix(k, "-bin") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// KeyByFullMethod returns a KeyFunc that keys a call by its full method,
// "/package.Service/Method". Join it with a client key (JoinKeys) for a
// limit per client per method.
func KeyByFullMethod() KeyFunc {
	return func(c Call) (string, error) {
		if c.FullMethod == "" {
			return "", fmt.Errorf("%w: no gRPC method", floodgate.ErrNoKey)
		}
		return c.FullMethod, nil
	}
}

// JoinKeys returns a KeyFunc whose key combines the keys of fns, in order,
// encoded as floodgate.JoinKeys encodes them (each component's length, a
// colon, the component), so no component can forge a boundary: "per
// client per method" is JoinKeys(clientIP, KeyByFullMethod()). The first
// component error is returned, wrapped. No functions, or a nil one, is an
// error wrapping floodgate.ErrInvalidOption.
func JoinKeys(fns ...KeyFunc) (KeyFunc, error) {
	generic := make([]func(Call) (string, error), len(fns))
	for i, f := range fns {
		if f != nil {
			generic[i] = f
		}
	}
	join, err := floodgate.JoinKeysFor(generic...)
	if err != nil {
		return nil, err
	}
	return join, nil
}
