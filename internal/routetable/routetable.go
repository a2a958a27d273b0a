// Package routetable is the per-method route table of the gRPC and
// connect adapters (grpclimit.NewRoutes, connectlimit.NewRoutes): a
// route names a full method "/package.Service/Method", a service
// "/package.Service/" for its methods no route names, or "/" for every
// call no other route takes; each route has its own selector of
// policies and its own limit.
package routetable

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// Build returns the table of n routes: route(i) gives the i-th route's
// name and policies, and newLimit makes its limit from its selector.
// kind names a route's name in errors ("method", "procedure"). No
// routes, a name that is none of the three forms, a name given twice or
// a route without policies is an error wrapping
// floodgate.ErrInvalidOption.
func Build[C, L any](kind string, n int, route func(i int) (string, []floodgate.PolicyFor[C]), newLimit func(*floodgate.SelectorFor[C]) (L, error)) (map[string]L, error) {
	if n == 0 {
		return nil, fmt.Errorf("%w: no routes", floodgate.ErrInvalidOption)
	}
	table := make(map[string]L, n)
	for i := range n {
		name, policies := route(i)
		if err := valid(kind, name); err != nil {
			return nil, err
		}
		if _, ok := table[name]; ok {
			return nil, fmt.Errorf("%w: route %q given twice", floodgate.ErrInvalidOption, name)
		}
		if len(policies) == 0 {
			return nil, fmt.Errorf("%w: route %q has no policy", floodgate.ErrInvalidOption, name)
		}
		sel, err := floodgate.NewSelectorFor(policies...)
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", name, err)
		}
		if table[name], err = newLimit(sel); err != nil {
			return nil, fmt.Errorf("route %q: %w", name, err)
		}
	}
	return table, nil
}

// valid accepts "/", "/pkg.Service/" and "/pkg.Service/Method".
func valid(kind, name string) error {
	if name == "/" {
		return nil
	}
	rest, ok := strings.CutPrefix(name, "/")
	service, method, two := strings.Cut(rest, "/")
	if !ok || !two || service == "" || strings.Contains(method, "/") {
		return fmt.Errorf("%w: route %s %q: give \"/package.Service/Method\", \"/package.Service/\" or \"/\"", floodgate.ErrInvalidOption, kind, name)
	}
	return nil
}

// Lookup returns the limit of a call to method: its own route's, its
// service's, or the default's; false when none applies.
func Lookup[L any](table map[string]L, method string) (L, bool) {
	if l, ok := table[method]; ok {
		return l, true
	}
	if j := strings.LastIndexByte(method, '/'); j > 0 {
		if l, ok := table[method[:j+1]]; ok {
			return l, true
		}
	}
	l, ok := table["/"]
	return l, ok
}
