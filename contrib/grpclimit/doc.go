// Package grpclimit rate-limits gRPC servers with floodgate: unary and
// stream server interceptors over any floodgate.Limiter, PolicySelector or
// route table.
//
// A gRPC call is an HTTP/2 POST to /package.Service/Method, and grpclimit
// treats it as one: each call is shown to floodgate's own middleware as an
// *http.Request whose RemoteAddr is the peer's address, whose Header holds
// the incoming metadata (keys canonicalized, pseudo-headers left out),
// whose Host is the :authority and whose URL.Path is the full method. So
// every floodgate key function works unchanged and with the same rules:
//
//   - floodgate.KeyByIP(...) keys by the peer, reading a trusted proxy's
//     x-forwarded-for (or x-real-ip, forwarded) metadata exactly as the
//     HTTP middleware reads the header (the default: the peer only);
//   - floodgate.KeyByHeader("x-api-key") keys by a metadata value (like
//     every key function constructor with arguments, it returns the
//     KeyFunc and an error);
//   - KeyByFullMethod keys by the method, and floodgate.JoinKeys combines
//     keys ("per client per method").
//
// A denied call fails with codes.ResourceExhausted carrying a
// google.rpc.RetryInfo detail with the exact wait, and the quota travels in
// the response header metadata under the HTTP header names in lower case
// (ratelimit, ratelimit-policy, and retry-after on a denial), formatted by
// floodgate itself and so identical to the HTTP headers. A client honours
// it by reading the RetryInfo:
//
//	st := status.Convert(err)
//	for _, d := range st.Details() {
//		if ri, ok := d.(*errdetails.RetryInfo); ok {
//			time.Sleep(ri.GetRetryDelay().AsDuration())
//		}
//	}
//
// When no decision can be made the interceptors fail closed with
// codes.Unavailable unless WithFailOpen is given; an error the caller
// caused (no key, an unusable address, a key that is too long) is
// codes.InvalidArgument under every policy, and a call whose client has
// gone away ends with codes.Canceled (or DeadlineExceeded) without the
// handler running.
package grpclimit
