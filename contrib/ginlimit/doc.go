// Package ginlimit rate-limits gin handlers with floodgate: New,
// NewPolicy and NewRoutes turn floodgate.NewMiddleware,
// NewPolicyMiddleware and NewRouteMiddleware, with the same options, into
// a gin.HandlerFunc; Serve wraps the engine so that the limits inside it
// count the status the client actually gets.
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
// limit.
//
// # Counting by status
//
// floodgate.WithCountStatus counts the status the client gets, also when
// a middleware registered before the limit writes it after its c.Next(),
// as an error handler answering 401 for a handler's c.Error does. Serve
// the engine through Serve for that to hold whatever the chain between
// them does:
//
//	http.ListenAndServe(addr, ginlimit.Serve(r))
//
// Serve records the status as it is written beneath gin, and the limit
// settles each request by it once the engine has returned. Without it,
// the limit settles as well as it can from above: the handlers write
// through the middleware's response writer, wrapped as a
// gin.ResponseWriter that stays the context's writer until the response
// is sent, so the status gin sends is seen (the last c.Status before the
// first write, also when nothing is written, also when a middleware
// before the limit writes it) — unless a middleware between that one and
// the limit swaps c.Writer for a writer of its own and restores the
// original after c.Next() (an access log capturing the body does): the
// limit sees that gin's own writer was swapped out before it, and a
// response not yet sent when its chain returned counts whatever its
// status, since what is written around the swap is not seen (a
// bodiless success then counts too; a success answered with a body is
// seen and given back). The limit then logs one WARN, with
// slog.Default, naming Serve. A status gin sends without a body after the whole chain is
// settled when the request's context ends (net/http cancels it when the
// handler returns), and until then the request counts. Either way, a
// handler that panics counts, whatever gin.Recovery then writes.
//
// A CORS preflight reaching the limit is settled the same way (see
// floodgate.WithLimitPreflights): given back when a CORS middleware after
// the limit answered it, through the limit's writer, as a preflight.
//
// Which requests are limited is gin's decision: attach the handler to the
// routes or groups to limit, rather than matching paths again
// (floodgate.MatchPattern and NewRoutes follow http.ServeMux, whose
// patterns and path cleaning are not gin's router's).
package ginlimit
