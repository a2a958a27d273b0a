package routetable

import (
	"errors"
	"testing"

	"github.com/floodgate-go/floodgate"
)

type call struct{}

// A method is limited by its own route, else its service's, else the
// default's; a name that merely starts like another is not it.
func TestLookup(t *testing.T) {
	table := map[string]string{"/a.S/M": "method", "/a.S/": "service", "/": "default"}
	for method, want := range map[string]string{
		"/a.S/M":  "method",
		"/a.S/N":  "service",
		"/a.S/MX": "service",
		"/a.SX/M": "default",
		"/b.T/M":  "default",
	} {
		if got, ok := Lookup(table, method); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", method, got, ok, want)
		}
	}
	delete(table, "/")
	if got, ok := Lookup(table, "/b.T/M"); ok {
		t.Errorf("no default: %q, want none", got)
	}
}

// Every impossible table is refused, naming what is wrong.
func TestBuildRefuses(t *testing.T) {
	lim, err := floodgate.NewTokenBucket(floodgate.PerMinute(1))
	if err != nil {
		t.Fatal(err)
	}
	key := func(call) (string, error) { return "k", nil }
	policy := []floodgate.PolicyFor[call]{{Name: "p", Limiter: lim, Key: key}}
	build := func(names []string, policies ...[]floodgate.PolicyFor[call]) error {
		_, err := Build("method", len(names), func(i int) (string, []floodgate.PolicyFor[call]) {
			if i < len(policies) {
				return names[i], policies[i]
			}
			return names[i], policy
		}, func(*floodgate.SelectorFor[call]) (int, error) { return 1, nil })
		return err
	}
	for name, names := range map[string][]string{
		"none": nil, "twice": {"/", "/"}, "empty": {""}, "no slash": {"a.B/C"}, "no method slash": {"/a.B"},
		"no service": {"//C"}, "too deep": {"/a.B/C/D"}, "trailing slash": {"/a.B/C/"},
	} {
		if err := build(names); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	if err := build([]string{"/a.B/C"}, []floodgate.PolicyFor[call]{}); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("no policy: %v, want ErrInvalidOption", err)
	}
	if err := build([]string{"/", "/a.B/", "/a.B/C"}); err != nil {
		t.Errorf("a valid table: %v", err)
	}
}
