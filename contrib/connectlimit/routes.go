package connectlimit

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/routetable"
)

// Route is one rule of a per-procedure table (NewRoutes): the calls of
// Procedure are limited by Policies.
type Route struct {
	// Procedure names the calls the route limits: a procedure,
	// "/package.Service/Method"; a service, "/package.Service/", for its
	// procedures that no route names; or "/" for every call no other
	// route takes, the table's default.
	Procedure string
	// Policies limit the calls of the route, tried in order as by a
	// selector: the first whose key function yields a key decides. At
	// least one is required.
	Policies []Policy
}

// NewRoutes returns an interceptor that limits each call by the route of
// its procedure: the route naming the procedure if there is one, else
// its service's, else "/". Calls no route matches are not limited. Each
// route has its own selector and admission core, configured by opts (the
// options of NewPolicy), with its own log pacing. A Procedure that is
// none of the three forms, a procedure given twice or a route without
// policies is an error wrapping floodgate.ErrInvalidOption. Give the
// interceptor to every handler the table names (connect.WithInterceptors
// on each, or on all of them at once); it limits only the calls it sees.
//
//	limit, err := connectlimit.NewRoutes([]connectlimit.Route{
//		{Procedure: "/auth.v1.AuthService/SignIn", Policies: []connectlimit.Policy{{Name: "sign-in", Limiter: signIns, Key: clientIP}}},
//		{Procedure: "/", Policies: []connectlimit.Policy{{Name: "default", Limiter: general, Key: clientIP}}},
//	})
func NewRoutes(routes []Route, opts ...Option) (*Interceptor, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := c.selectorOnly(); err != nil {
		return nil, err
	}
	i := c.interceptor()
	i.routes, err = routetable.Build("procedure", len(routes),
		func(j int) (string, []Policy) { return routes[j].Procedure, routes[j].Policies },
		func(sel *floodgate.SelectorFor[Call]) (*limit, error) { return newLimit(c, sel) })
	if err != nil {
		return nil, err
	}
	return i, nil
}

// route returns the limit of a procedure: its own route, its service's,
// or the default; nil when none applies.
func (i *Interceptor) route(procedure string) *limit {
	l, _ := routetable.Lookup(i.routes, procedure)
	return l
}
