// Package grpclimit rate-limits gRPC servers with floodgate: unary and
// stream server interceptors over any floodgate.Limiter, selector of
// policies, or table of per-method routes.
//
//	clientIP, err := grpclimit.KeyByIP(floodgate.TrustProxies(lb), floodgate.FromXForwardedFor())
//	limit, err := grpclimit.New(limiter, grpclimit.WithKeyFunc(clientIP))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()), grpc.ChainStreamInterceptor(limit.Stream()))
//
// Each call is keyed from its own data (Call: the context with the peer
// and the incoming metadata, and the full method):
//
//   - KeyByIP keys by the peer's address, with the rules of
//     floodgate.KeyByIP for the same options; behind a proxy, the
//     forwarding metadata the options name (x-forwarded-for, x-real-ip,
//     forwarded) is believed from the trusted proxies only;
//   - KeyByMetadata keys by a metadata value, KeyByFullMethod by the
//     method, and JoinKeys combines keys ("per client per method").
//
// floodgate's admission core decides (floodgate.Gate), and the
// interceptors answer in gRPC's terms:
//
//   - an allowed call runs its handler and, by default, carries no
//     metadata of the limit's: the quota goes with denials, which is all
//     grpc-go's retry policy and a client reading RetryInfo need, and an
//     allowed call formats and sends nothing. WithQuotaOnAllowed sends
//     it with allowed calls too, in their response header metadata, for
//     clients that pace themselves by it: under floodgate's HTTP header
//     names in lower case (ratelimit-policy and ratelimit by default),
//     formatted as the HTTP middleware formats them. A unary call's are
//     sent as its handler returns, just before grpc-go would send them
//     with the response; if the handler failed, they go in the trailers
//     instead, so that the failure stays Trailers-Only and a client's
//     retry policy retries it as it would without the limit; where the
//     headers have gone already (the handler sent them, or a limit
//     inside this one did), in the trailers too. A stream's are set when
//     it opens, and go with its first message;
//   - a denied call is Trailers-Only: codes.ResourceExhausted with a
//     google.rpc.RetryInfo detail holding the exact wait, and in the
//     trailers the quota metadata, retry-after and grpc-retry-pushback-ms,
//     the wait in milliseconds rounded up (gRFC A6), with nothing sent as
//     headers. So a grpc-go client with a standard retry policy
//     (RESOURCE_EXHAUSTED retryable) retries after exactly the wait the
//     limit names; a call that costs more than the limit can ever hold
//     gets -1 ("do not retry") and no RetryInfo. Put the interceptors
//     first in the chain: headers sent before them would end the
//     Trailers-Only form, and under WithQuotaOnAllowed an interceptor
//     outside them cannot set headers once an allowed unary call returns
//     (they are sent);
//   - a limiter that fails is codes.Unavailable (fail closed) unless
//     WithFailOpen; a key error the caller caused (no key, an unusable
//     address, a key too long) is codes.InvalidArgument under every
//     policy; a misconfigured key function codes.Internal; a call whose
//     client went away during the decision ends with codes.Canceled (or
//     DeadlineExceeded) without its handler running.
//
// The standard health service, grpc.health.v1.Health, is not limited
// unless WithLimitHealth is given: a client using client-side health
// checking would otherwise lose its whole channel once the quota is spent.
// A stream is decided once, when it opens. WithCountCodes counts only
// some outcomes (failed sign-ins), with the cost reserved before the
// handler and given back after it.
//
// The admission kinds of floodgate work here as over HTTP: WithCostAfter
// charges a call its real cost once it has ended (what its handler
// reports with floodgate.ReportCost on its context, or a trailer it sets:
// CostTrailer); an in-flight limit (floodgate.NewInFlight) holds a call's
// slot until its handler returns, a stream's until the stream ends, and a
// service-wide cap refuses Trailers-Only with codes.Unavailable, a
// RetryInfo and the pushback; WithWait holds a call for its turn, and
// refuses at once a call whose deadline comes first.
package grpclimit
