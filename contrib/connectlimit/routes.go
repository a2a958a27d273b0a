package connectlimit

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
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
	i := c.interceptor()
	i.routes = make(map[string]*limit, len(routes))
	for _, r := range routes {
		if err := validRouteProcedure(r.Procedure); err != nil {
			return nil, err
		}
		if i.routes[r.Procedure] != nil {
			return nil, fmt.Errorf("%w: route %q given twice", floodgate.ErrInvalidOption, r.Procedure)
		}
		if len(r.Policies) == 0 {
			return nil, fmt.Errorf("%w: route %q has no policy", floodgate.ErrInvalidOption, r.Procedure)
		}
		sel, err := floodgate.NewSelectorFor(r.Policies...)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", r.Procedure, err)
		}
		if i.routes[r.Procedure], err = newLimit(c, sel); err != nil {
			return nil, fmt.Errorf("route %q: %w", r.Procedure, err)
		}
	}
	return i, nil
}

// validRouteProcedure accepts "/", "/pkg.Service/" and
// "/pkg.Service/Method".
func validRouteProcedure(p string) error {
	if p == "/" {
		return nil
	}
	rest, ok := strings.CutPrefix(p, "/")
	service, method, two := strings.Cut(rest, "/")
	if !ok || !two || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("%w: route procedure %q: give \"/package.Service/Method\", \"/package.Service/\" or \"/\"", floodgate.ErrInvalidOption, p)
	}
	return nil
}

// route returns the limit of a procedure: its own route, its service's,
// or the default; nil when none applies.
func (i *Interceptor) route(procedure string) *limit {
	if l := i.routes[procedure]; l != nil {
		return l
	}
	if j := strings.LastIndexByte(procedure, '/'); j > 0 {
		if l := i.routes[procedure[:j+1]]; l != nil {
			return l
		}
	}
	return i.routes["/"]
}
