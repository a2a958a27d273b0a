package connectlimit

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"connectrpc.com/connect"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/headerval"
)

// Call is a connect call as connectlimit's key functions see it, on the
// handler side: its context, its Spec (the procedure,
// "/package.Service/Method"), its Peer (the client's address as
// http.Request.RemoteAddr, and the protocol) and its request headers.
type Call struct {
	Context context.Context
	Spec    connect.Spec
	Peer    connect.Peer
	// Header holds the request headers: HTTP headers for the Connect
	// protocol, gRPC metadata in canonical form for gRPC and gRPC-Web.
	Header http.Header
}

// KeyFunc returns the key a call is limited by. An error wrapping
// floodgate.ErrNoKey means the call does not carry what the function
// needs: a policy selector then tries its next policy, and a call no
// policy applies to is refused with connect.CodeInvalidArgument, under
// every error policy. It is the Key of a floodgate.PolicyFor[Call].
type KeyFunc func(Call) (string, error)

// Policy is a named limit over connect calls: a Limiter and the KeyFunc
// that keys a call for it. NewPolicy takes a selector over policies.
type Policy = floodgate.PolicyFor[Call]

// KeyByIP returns a KeyFunc that keys a call by its client's IP address,
// with the rules of floodgate.KeyByIP for the same options, read from
// the call's Peer.Addr and request headers: without options the peer
// only; behind a proxy, the header the options name (X-Forwarded-For,
// say), believed from the trusted proxies only. The options are checked
// as floodgate.KeyByIP checks them.
func KeyByIP(opts ...floodgate.IPOption) (KeyFunc, error) {
	res, err := floodgate.NewIPResolver(opts...)
	if err != nil {
		return nil, err
	}
	header := res.Header()
	return func(c Call) (string, error) {
		var forwarded []string
		if header != "" {
			forwarded = c.Header[header]
		}
		return res.Key(c.Peer.Addr, forwarded)
	}, nil
}

// KeyByHeader returns a KeyFunc that keys a call by the value of the
// request header name (gRPC metadata, on the gRPC protocols), trimmed of
// white space, as floodgate.KeyByHeader does: a header given on several
// lines must give the same value on each, or the call gets
// floodgate.ErrAmbiguousKey, connect.CodeInvalidArgument under every
// error policy (an empty line beside another included), since a handler
// reading another line than the first would act on another value than
// the one counted. A missing or empty header yields floodgate.ErrNoKey.
// A name that is not an HTTP token is an error wrapping
// floodgate.ErrInvalidOption.
func KeyByHeader(name string) (KeyFunc, error) {
	if !validToken(name) {
		return nil, fmt.Errorf("%w: KeyByHeader: header name %q is not an HTTP token: pass a header name such as \"X-API-Key\"", floodgate.ErrInvalidOption, name)
	}
	key := textproto.CanonicalMIMEHeaderKey(name)
	return func(c Call) (string, error) {
		vs := c.Header[key]
		v, ok := headerval.One(vs)
		switch {
		case !ok:
			return "", fmt.Errorf("%w: header %s is given on %d lines that differ", floodgate.ErrAmbiguousKey, key, len(vs))
		case v == "":
			return "", fmt.Errorf("%w: header %s is missing or empty", floodgate.ErrNoKey, key)
		}
		return v, nil
	}, nil
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// KeyByProcedure returns a KeyFunc that keys a call by its procedure,
// "/package.Service/Method". Join it with a client key (JoinKeys) for a
// limit per client per procedure.
func KeyByProcedure() KeyFunc {
	return func(c Call) (string, error) {
		if c.Spec.Procedure == "" {
			return "", fmt.Errorf("%w: no procedure", floodgate.ErrNoKey)
		}
		return c.Spec.Procedure, nil
	}
}

// JoinKeys returns a KeyFunc whose key combines the keys of fns, in order,
// encoded as floodgate.JoinKeys encodes them, so no component can forge a
// boundary. The first component error is returned, wrapped. No
// functions, or a nil one, is an error wrapping
// floodgate.ErrInvalidOption.
func JoinKeys(fns ...KeyFunc) (KeyFunc, error) {
	generic := make([]func(Call) (string, error), len(fns))
	for i, f := range fns {
		if f != nil { // a nil KeyFunc stays a nil func, which JoinKeysFor refuses
			generic[i] = f
		}
	}
	join, err := floodgate.JoinKeysFor(generic...)
	if err != nil {
		return nil, err
	}
	return join, nil
}
