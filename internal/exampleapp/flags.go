package exampleapp

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParsePrefixes parses the -trusted-proxy flag: comma-separated CIDRs or
// single addresses (a single address is its own /32 or /128).
func ParsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range SplitComma(s) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxy %q: not a CIDR or an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SplitComma splits a comma-separated flag value, trimming spaces and
// dropping empty fields.
func SplitComma(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
