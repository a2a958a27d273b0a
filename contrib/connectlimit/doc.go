// Package connectlimit rate-limits connect-go handlers with floodgate: a
// connect.Interceptor over any floodgate.Limiter, selector of policies,
// or table of per-procedure routes, for unary and streaming handlers, on
// all three of connect's protocols (Connect, gRPC, gRPC-Web).
//
//	clientIP, err := connectlimit.KeyByIP(floodgate.TrustProxies(lb), floodgate.FromXForwardedFor())
//	limit, err := connectlimit.New(limiter, connectlimit.WithKeyFunc(clientIP))
//	path, handler := greetv1connect.NewGreetServiceHandler(svc, connect.WithInterceptors(limit))
//
// Each call is keyed from its own data (Call): KeyByIP reads the peer's
// address and, from trusted proxies only, the forwarding header the
// options name, with the rules of floodgate.KeyByIP; KeyByHeader a
// request header; KeyByProcedure the procedure; JoinKeys combines them.
// floodgate's admission core decides (floodgate.Gate), and the
// interceptor answers in connect's error model:
//
//   - an allowed call runs its handler and, by default, carries no
//     header of the limit's: the quota goes with denials, which is all a
//     retry policy or a client reading RetryInfo needs, and an allowed
//     call formats and sends nothing. WithQuotaOnAllowed sends the quota
//     headers (RateLimit-Policy and RateLimit by default, as the HTTP
//     middleware sends them) with allowed calls too, on the response or
//     in the metadata of the *connect.Error its handler returns, for
//     clients that pace themselves by them;
//   - a denied call fails with connect.CodeResourceExhausted and a
//     google.rpc.RetryInfo detail holding the exact wait; the error's
//     metadata carries the quota headers and Retry-After, and on the gRPC
//     and gRPC-Web protocols grpc-retry-pushback-ms (gRFC A6: the wait in
//     milliseconds, rounded up; -1, "do not retry", for a call that costs
//     more than the limit can ever hold, which gets no RetryInfo);
//   - a limiter that fails is CodeUnavailable (fail closed) unless
//     WithFailOpen; a key error the caller caused (no key, an unusable
//     address, a key too long) is CodeInvalidArgument under every policy;
//     a misconfigured key function CodeInternal; a call whose client went
//     away during the decision CodeCanceled, without its handler running.
//
// NewRoutes limits by a per-procedure table (a procedure, a service
// "/pkg.Service/", or "/"), and WithSkip exempts the calls a predicate
// names. The health service, grpc.health.v1.Health, is not limited unless
// WithLimitHealth is given. A stream is decided once, when it opens.
// WithCountCodes counts only some outcomes (failed sign-ins), with the
// cost reserved before the handler and given back after it.
//
// The admission kinds of floodgate work here as over HTTP: WithCostAfter
// charges a call its real cost once it has ended (what its handler
// reports with floodgate.ReportCost, or a trailer: CostTrailer); an
// in-flight limit (floodgate.NewInFlight) holds a call's slot until its
// handler returns, a stream's until the stream ends, and a service-wide
// cap refuses with CodeUnavailable and a RetryInfo; WithWait holds a call
// for its turn.
//
// On the gRPC protocol, connect answers through net/http, which cannot
// send a Trailers-Only response: a grpc-go client's retry policy does not
// retry a denial from a connect server (connect and gRPC-Web clients, and
// code reading the RetryInfo, are not affected). contrib/grpclimit, on a
// grpc-go server, sends Trailers-Only denials.
package connectlimit
