package exampleapp

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// maxRateLimit is floodgate's bound on a rate's limit and a burst (2^24).
const maxRateLimit = 1 << 24

// The algorithms a policy file names.
const (
	algoTokenBucket    = "token_bucket"
	algoSlidingLog     = "sliding_log"
	algoSlidingCounter = "sliding_counter"
)

// headerStyles maps the file's header style names to floodgate's.
var headerStyles = map[string]floodgate.HeaderStyle{
	"ietf": floodgate.HeadersIETF, "legacy": floodgate.HeadersLegacy,
	"both": floodgate.HeadersBoth, "none": floodgate.HeadersNone,
}

// validate checks what can be checked without building anything.
func (pf *PolicyFile) validate() error {
	if err := validHeaders("headers", pf.Headers); err != nil {
		return err
	}
	for i, s := range pf.TrustedProxies {
		if _, err := ParsePrefixes(s); err != nil || strings.Contains(s, ",") || strings.TrimSpace(s) == "" {
			return fieldErr(fmt.Sprintf("trustedProxies[%d]", i), fmt.Sprintf("%q is not a CIDR or an address", s))
		}
	}
	if bc := pf.BotCheck; bc != nil {
		if err := validRoutes("botCheck.routes", bc.Routes); err != nil {
			return err
		}
		if len(bc.Hostnames) == 0 {
			return fieldErr("botCheck.hostnames", "required: the hostnames of the pages that show the widget")
		}
	}
	if len(pf.Policies) == 0 {
		return fieldErr("policies", "at least one policy is required (a file that limits nothing is a mistake)")
	}
	names := map[string]string{}
	for i := range pf.Policies {
		if err := pf.Policies[i].validate(fmt.Sprintf("policies[%d]", i), names); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one policy at path; names maps each name taken to the
// path that took it.
func (p *PolicySpec) validate(path string, names map[string]string) error {
	if err := validName(path, p.Name, names); err != nil {
		return err
	}
	if err := validRoutes(path+".routes", p.Routes); err != nil {
		return err
	}
	if err := p.Key.validate(path + ".key"); err != nil {
		return err
	}
	if err := p.Rate.validate(path + ".rate"); err != nil {
		return err
	}
	for j, f := range p.Fallback {
		fpath := fmt.Sprintf("%s.fallback[%d]", path, j)
		if err := validName(fpath, f.Name, names); err != nil {
			return err
		}
		if err := f.Key.validate(fpath + ".key"); err != nil {
			return err
		}
		if err := f.Rate.validate(fpath + ".rate"); err != nil {
			return err
		}
	}
	if err := validHeaders(path+".headers", p.Headers); err != nil {
		return err
	}
	if len(p.DeniedBody) > 0 && p.DeniedBody[0] != '{' {
		return fieldErr(path+".deniedBody", "must be a JSON object (the body answered with 429)")
	}
	return nil
}

func validName(path, name string, names map[string]string) error {
	if name == "" {
		return fieldErr(path+".name", "required")
	}
	if prev, ok := names[name]; ok {
		return fieldErr(path+".name", fmt.Sprintf("%q is already the name of %s", name, prev))
	}
	names[name] = path
	return nil
}

func validRoutes(path string, routes []string) error {
	if len(routes) == 0 {
		return fieldErr(path, `at least one ServeMux pattern is required ("/" for every request)`)
	}
	for i, r := range routes {
		if strings.TrimSpace(r) == "" {
			return fieldErr(fmt.Sprintf("%s[%d]", path, i), "must not be empty")
		}
	}
	return nil
}

func validHeaders(path, style string) error {
	if _, ok := headerStyles[style]; style != "" && !ok {
		return fieldErr(path, fmt.Sprintf(`%q: must be "ietf", "legacy", "both" or "none"`, style))
	}
	return nil
}

// validate checks a key: exactly one source, and options that fit it.
func (k *KeySpec) validate(path string) error {
	var sources []string
	for name, set := range map[string]bool{"ip": k.IP != nil, "header": k.Header != "", "query": k.Query != "", "form": k.Form != "", "json": k.JSON != ""} {
		if set {
			sources = append(sources, name)
		}
	}
	if len(sources) != 1 {
		return fieldErr(path, "exactly one of ip, header, query, form or json is required")
	}
	if k.MaxBytes < 0 || (k.MaxBytes > 0 && k.JSON == "") {
		return fieldErr(path+".maxBytes", "only for a json key, and > 0")
	}
	if k.MaxBytes > MaxPolicyFileBytes {
		return fieldErr(path+".maxBytes", fmt.Sprintf("must be at most %d", MaxPolicyFileBytes))
	}
	if k.Pattern && k.IP != nil {
		return fieldErr(path+".pattern", "not for an ip key (an address has no nickname pattern)")
	}
	if ip := k.IP; ip != nil && (ip.IPv6Prefix < 0 || ip.IPv6Prefix > 128) {
		return fieldErr(path+".ip.ipv6Prefix", "must be in 1..128")
	}
	if ip := k.IP; ip != nil && (ip.IPv4Prefix < 0 || ip.IPv4Prefix > 32) {
		return fieldErr(path+".ip.ipv4Prefix", "must be in 1..32")
	}
	return nil
}

// validate checks a rate as floodgate's constructors will.
func (r *RateSpec) validate(path string) error {
	switch r.Algorithm {
	case algoTokenBucket, algoSlidingLog, algoSlidingCounter:
	case "":
		return rateErr(path+".algorithm", `required: "token_bucket", "sliding_log" or "sliding_counter"`)
	default:
		return rateErr(path+".algorithm", fmt.Sprintf(`%q: must be "token_bucket", "sliding_log" or "sliding_counter"`, r.Algorithm))
	}
	max := maxRateLimit
	if r.Algorithm == algoSlidingLog {
		max = floodgate.MaxSlidingLogLimit
	}
	if r.Limit <= 0 || r.Limit > max {
		return rateErr(path+".limit", fmt.Sprintf("must be > 0 and at most %d", max))
	}
	if r.Period <= 0 {
		return rateErr(path+".period", "must be > 0")
	}
	if r.Burst != 0 && r.Algorithm != algoTokenBucket {
		return rateErr(path+".burst", "only a token_bucket has a burst")
	}
	if r.Burst < 0 || r.Burst > maxRateLimit {
		return rateErr(path+".burst", fmt.Sprintf("must be > 0 and at most %d", maxRateLimit))
	}
	return nil
}

// rate returns the spec as a floodgate.Rate.
func (r *RateSpec) rate() floodgate.Rate {
	return floodgate.Rate{Limit: r.Limit, Period: time.Duration(r.Period)}
}

// prefixes returns the file's trusted proxies.
func (pf *PolicyFile) prefixes() []netip.Prefix {
	out, _ := ParsePrefixes(strings.Join(pf.TrustedProxies, ",")) // validated
	return out
}
