package grpclimit

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
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
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: no routes", floodgate.ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := c.selectorOnly(); err != nil {
		return nil, err
	}
	i := c.interceptors()
	i.routes = make(map[string]*limit, len(routes))
	for _, r := range routes {
		if err := validRouteMethod(r.Method); err != nil {
			return nil, err
		}
		if i.routes[r.Method] != nil {
			return nil, fmt.Errorf("%w: route %q given twice", floodgate.ErrInvalidOption, r.Method)
		}
		if len(r.Policies) == 0 {
			return nil, fmt.Errorf("%w: route %q has no policy", floodgate.ErrInvalidOption, r.Method)
		}
		sel, err := floodgate.NewSelectorFor(r.Policies...)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", r.Method, err)
		}
		if i.routes[r.Method], err = newLimit(c, sel); err != nil {
			return nil, fmt.Errorf("route %q: %w", r.Method, err)
		}
	}
	return i, nil
}

// validRouteMethod accepts "/", "/pkg.Service/" and "/pkg.Service/Method".
func validRouteMethod(m string) error {
	if m == "/" {
		return nil
	}
	rest, ok := strings.CutPrefix(m, "/")
	service, method, two := strings.Cut(rest, "/")
	if !ok || !two || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("%w: route method %q: give \"/package.Service/Method\", \"/package.Service/\" or \"/\"", floodgate.ErrInvalidOption, m)
	}
	return nil
}

// route returns the limit of a method: its own route, its service's, or
// the default; nil when none applies.
func (i *Interceptors) route(method string) *limit {
	if l := i.routes[method]; l != nil {
		return l
	}
	if j := strings.LastIndexByte(method, '/'); j > 0 {
		if l := i.routes[method[:j+1]]; l != nil {
			return l
		}
	}
	return i.routes["/"]
}
