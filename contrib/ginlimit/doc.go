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
// wrapped as a gin.ResponseWriter, so floodgate.WithCountStatus sees the
// status gin actually sends (the last c.Status before the first write, as
// gin has it, also when nothing is written at all).
//
// Which requests are limited is gin's decision: attach the handler to the
// routes or groups to limit, rather than matching paths again
// (floodgate.MatchPattern and NewRoutes follow http.ServeMux, whose
// patterns and path cleaning are not gin's router's).
package ginlimit
