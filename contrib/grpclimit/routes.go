package grpclimit

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/routetable"
)

// Route is one rule of a per-method table (NewRoutes): the calls of
// Method are limited by Policies.
type Route struct {
	// Method names the calls the route limits: a full method,
	// "/package.Service/Method"; a service, "/package.Service/", for its
	// methods that no route names; or "/" for every call no other route
	// takes, the table's default.
	Method string
	// Policies limit the calls of the route, tried in order as by a
	// selector: the first whose key function yields a key decides. At
	// least one is required.
	Policies []Policy
}

// NewRoutes returns interceptors that limit each call by the route of its
// method: the route naming the full method if there is one, else its
// service's, else "/". Calls no route matches are not limited. Each route
// has its own selector and admission core, configured by opts (the
// options of NewPolicy), with its own log pacing. A Method that is none of
// the three forms, a method given twice or a route without policies is
// an error wrapping floodgate.ErrInvalidOption.
//
//	lim, err := grpclimit.NewRoutes([]grpclimit.Route{
//		{Method: "/auth.v1.Auth/SignIn", Policies: []grpclimit.Policy{{Name: "sign-in", Limiter: signIns, Key: clientIP}}},
//		{Method: "/", Policies: []grpclimit.Policy{{Name: "default", Limiter: general, Key: clientIP}}},
//	})
func NewRoutes(routes []Route, opts ...Option) (*Interceptors, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := c.selectorOnly(); err != nil {
		return nil, err
	}
	i := c.interceptors()
	i.routes, err = routetable.Build("method", len(routes),
		func(j int) (string, []Policy) { return routes[j].Method, routes[j].Policies },
		func(sel *floodgate.SelectorFor[Call]) (*limit, error) { return newLimit(c, sel) })
	if err != nil {
		return nil, err
	}
	return i, nil
}

// route returns the limit of a method: its own route, its service's, or
// the default; nil when none applies.
func (i *Interceptors) route(method string) *limit {
	l, _ := routetable.Lookup(i.routes, method)
	return l
}
