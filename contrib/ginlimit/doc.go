// Package ginlimit rate-limits gin handlers with floodgate: New,
// NewPolicy and NewRoutes turn floodgate.NewMiddleware,
// NewPolicyMiddleware and NewRouteMiddleware, with the same options, into
// a gin.HandlerFunc.
//
//	limit, err := ginlimit.New(limiter, floodgate.WithKeyFunc(clientIP))
//	if err != nil { ... }
//	r := gin.New()
//	r.POST("/login", limit, login)
//
// Every floodgate option keeps its meaning. A denied request gets
// floodgate's response (429, Retry-After, the quota headers, the denied
// body) and the gin chain is aborted: the handlers after the limit do not
// run. An allowed one runs the rest of the chain exactly once, inside the
// limit. The handlers write through the middleware's response writer,
// wrapped as a gin.ResponseWriter, so floodgate.WithCountStatus counts
// the status gin actually sends (the last c.Status before the first
// write, as gin has it, also when nothing is written at all) — also when
// a middleware registered before the limit writes it after its c.Next(),
// as an error handler answering 401 for a handler's c.Error does. The
// wrapper stays the context's writer until the response is sent, and
// takes the settlement over from the middleware
// (floodgate.DeferredSettler): a request is settled once the limit's
// chain has returned and its status is sent; a status gin sends without
// a body after the whole chain is settled when the request's context ends
// (net/http cancels it when the handler returns), and until then the
// request counts. A handler that panics counts, whatever gin.Recovery
// then writes.
//
// Which requests are limited is gin's decision: attach the handler to the
// routes or groups to limit, rather than matching paths again
// (floodgate.MatchPattern and NewRoutes follow http.ServeMux, whose
// patterns and path cleaning are not gin's router's).
package ginlimit
