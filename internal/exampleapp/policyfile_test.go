package exampleapp

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// validPolicy is a policy file's one policy, for the table to spoil.
const validPolicy = `{"name": "probe", "routes": ["GET /auth/available/user_id"], "key": {"ip": {}},
	"rate": {"limit": 10, "period": "10m", "algorithm": "token_bucket"}}`

// file returns a policy file of the given policies.
func file(policies ...string) string {
	return `{"policies": [` + strings.Join(policies, ",") + `]}`
}

func TestParsePolicyFileErrors(t *testing.T) {
	tests := []struct {
		name, file string
		want       string // the error's text, from its start
		sentinel   error
	}{
		{"limit zero", file(validPolicy, validPolicy, strings.Replace(validPolicy, `"limit": 10`, `"limit": 0`, 1)),
			"policies[1].name: ", floodgate.ErrInvalidOption}, // the repeated name is found first
		{"limit zero at 2", file(strings.Replace(validPolicy, `"probe"`, `"a"`, 1), strings.Replace(validPolicy, `"probe"`, `"b"`, 1),
			strings.Replace(validPolicy, `"limit": 10`, `"limit": 0`, 1)),
			"policies[2].rate.limit: must be > 0", floodgate.ErrInvalidRate},
		{"limit negative", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": -1`, 1)), "policies[0].rate.limit: must be > 0", floodgate.ErrInvalidRate},
		{"limit too large", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": 16777217`, 1)), "policies[0].rate.limit: must be > 0 and at most 16777216", floodgate.ErrInvalidRate},
		{"sliding log too large", file(strings.NewReplacer(`"limit": 10`, `"limit": 70000`, "token_bucket", "sliding_log").Replace(validPolicy)), "policies[0].rate.limit: must be > 0 and at most 65536", floodgate.ErrInvalidRate},
		{"limit not an integer", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": 1.5`, 1)), "policies[0].rate.limit: must be an integer", floodgate.ErrInvalidOption},
		{"limit a string", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": "10"`, 1)), "policies[0].rate.limit: must be an integer", floodgate.ErrInvalidOption},
		{"period zero", file(strings.Replace(validPolicy, `"10m"`, `"0s"`, 1)), "policies[0].rate.period: must be > 0", floodgate.ErrInvalidRate},
		{"period negative", file(strings.Replace(validPolicy, `"10m"`, `"-1m"`, 1)), "policies[0].rate.period: must be > 0", floodgate.ErrInvalidRate},
		{"period not a duration", file(strings.Replace(validPolicy, `"10m"`, `"10 minutes"`, 1)), `policies[0].rate.period: "10 minutes" is not a duration`, floodgate.ErrInvalidOption},
		{"period a number", file(strings.Replace(validPolicy, `"10m"`, `600`, 1)), `policies[0].rate.period: must be a duration string`, floodgate.ErrInvalidOption},
		{"no algorithm", file(strings.Replace(validPolicy, `, "algorithm": "token_bucket"`, ``, 1)), "policies[0].rate.algorithm: required", floodgate.ErrInvalidRate},
		{"unknown algorithm", file(strings.Replace(validPolicy, `token_bucket`, `leaky_bucket`, 1)), `policies[0].rate.algorithm: "leaky_bucket": must be`, floodgate.ErrInvalidRate},
		{"burst on a window", file(strings.Replace(validPolicy, `"algorithm": "token_bucket"`, `"algorithm": "sliding_log", "burst": 5`, 1)), "policies[0].rate.burst: only a token_bucket has a burst", floodgate.ErrInvalidRate},
		{"burst negative", file(strings.Replace(validPolicy, `"algorithm"`, `"burst": -2, "algorithm"`, 1)), "policies[0].rate.burst: must be > 0", floodgate.ErrInvalidRate},
		{"unknown field", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": 10, "limt": 5`, 1)), "policies[0].rate.limt: unknown field", floodgate.ErrInvalidOption},
		{"unknown top-level field", `{"policies": [` + validPolicy + `], "polices": []}`, "polices: unknown field", floodgate.ErrInvalidOption},
		{"field in another case", file(strings.Replace(validPolicy, `"limit"`, `"Limit"`, 1)), "policies[0].rate.Limit: unknown field", floodgate.ErrInvalidOption},
		{"field twice", file(strings.Replace(validPolicy, `"limit": 10`, `"limit": 10, "limit": 1000`, 1)), "policies[0].rate.limit: given twice", floodgate.ErrInvalidOption},
		{"no policies", `{"policies": []}`, "policies: at least one policy", floodgate.ErrInvalidOption},
		{"policies missing", `{}`, "policies: at least one policy", floodgate.ErrInvalidOption},
		{"not an object", `[]`, "must be an object", floodgate.ErrInvalidOption},
		{"policies not an array", `{"policies": {}}`, "policies: must be an array", floodgate.ErrInvalidOption},
		{"trailing data", file(validPolicy) + ` {}`, "data after the JSON object", floodgate.ErrInvalidOption},
		{"broken JSON", `{"policies": [`, "policies: not JSON", floodgate.ErrInvalidOption},
		{"no name", file(strings.Replace(validPolicy, `"name": "probe", `, ``, 1)), "policies[0].name: required", floodgate.ErrInvalidOption},
		{"no routes", file(strings.Replace(validPolicy, `"routes": ["GET /auth/available/user_id"], `, ``, 1)), "policies[0].routes: at least one", floodgate.ErrInvalidOption},
		{"empty route", file(strings.Replace(validPolicy, `"GET /auth/available/user_id"`, `"/", " "`, 1)), "policies[0].routes[1]: must not be empty", floodgate.ErrInvalidOption},
		{"no key", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {},`, 1)), "policies[0].key: exactly one of", floodgate.ErrInvalidOption},
		{"two keys", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {"ip": {}, "header": "X-Api-Key"},`, 1)), "policies[0].key: exactly one of", floodgate.ErrInvalidOption},
		{"pattern on ip", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {"ip": {}, "pattern": true},`, 1)), "policies[0].key.pattern: not for an ip key", floodgate.ErrInvalidOption},
		{"maxBytes without json", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {"query": "q", "maxBytes": 10},`, 1)), "policies[0].key.maxBytes: only for a json key", floodgate.ErrInvalidOption},
		{"ipv6 prefix", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {"ip": {"ipv6Prefix": 129}},`, 1)), "policies[0].key.ip.ipv6Prefix: must be in 1..128", floodgate.ErrInvalidOption},
		{"headers", file(strings.Replace(validPolicy, `"name": "probe",`, `"name": "probe", "headers": "x-ratelimit",`, 1)), `policies[0].headers: "x-ratelimit": must be`, floodgate.ErrInvalidOption},
		{"file headers", `{"headers": "IETF", "policies": [` + validPolicy + `]}`, `headers: "IETF": must be`, floodgate.ErrInvalidOption},
		{"denied body not an object", file(strings.Replace(validPolicy, `"name": "probe",`, `"name": "probe", "deniedBody": "too many",`, 1)), "policies[0].deniedBody: must be a JSON object", floodgate.ErrInvalidOption},
		{"trusted proxy", `{"trustedProxies": ["10.0.0.0/8", "proxy.internal"], "policies": [` + validPolicy + `]}`, `trustedProxies[1]: "proxy.internal" is not a CIDR`, floodgate.ErrInvalidOption},
		{"fallback name taken", file(strings.Replace(validPolicy, `"name": "probe",`, `"name": "probe", "fallback": [{"name": "probe", "key": {"ip": {}}, "rate": {"limit": 1, "period": "1m", "algorithm": "sliding_log"}}],`, 1)),
			`policies[0].fallback[0].name: "probe" is already the name of policies[0]`, floodgate.ErrInvalidOption},
		{"fallback rate", file(strings.Replace(validPolicy, `"name": "probe",`, `"name": "probe", "fallback": [{"name": "ip", "key": {"ip": {}}, "rate": {"limit": 1, "period": "0s", "algorithm": "sliding_log"}}],`, 1)),
			`policies[0].fallback[0].rate.period: must be > 0`, floodgate.ErrInvalidRate},
		{"bot check hostnames", `{"botCheck": {"routes": ["POST /signup"]}, "policies": [` + validPolicy + `]}`, "botCheck.hostnames: required", floodgate.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pf, err := ParsePolicyFile([]byte(tt.file))
			if err == nil {
				t.Fatalf("parsed %+v, want error %q", pf, tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %q, want it to start with %q", err, tt.want)
			}
			if !errors.Is(err, tt.sentinel) {
				t.Errorf("error %q does not wrap %v", err, tt.sentinel)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %T is not a *FieldError", err)
			}
		})
	}
}

// TestBuildPolicyFileErrors: what only floodgate's constructors can
// refuse is refused with the field's path, wrapping their sentinel.
func TestBuildPolicyFileErrors(t *testing.T) {
	tests := []struct {
		name, file, want string
		opts             PolicyOptions
	}{
		{"bad pattern", file(strings.Replace(validPolicy, `"GET /auth/available/user_id"`, `"/", "GET /{x}/{x}"`, 1)), "policies[0].routes[1]: ", PolicyOptions{}},
		{"trust everyone", `{"trustedProxies": ["0.0.0.0/0"], "policies": [` + validPolicy + `]}`, "trustedProxies: ", PolicyOptions{}},
		{"bad header name", file(strings.Replace(validPolicy, `"key": {"ip": {}},`, `"key": {"header": "X Api"},`, 1)), "policies[0].key: ", PolicyOptions{}},
		{"policy name not ASCII", file(strings.Replace(validPolicy, `"probe"`, `"probé"`, 1)), "policies[0]: ", PolicyOptions{}},
		{"bot check without a secret", `{"botCheck": {"routes": ["POST /signup"], "hostnames": ["example.com"]}, "policies": [` + validPolicy + `]}`, "botCheck: TURNSTILE_SECRET is not set", PolicyOptions{}},
		{"secret without a bot check", file(validPolicy), "botCheck: required: TURNSTILE_SECRET is set", PolicyOptions{RequireBotCheck: true, BotCheck: passBotCheck}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = discardLogger()
			_, err := NewPolicyServer([]byte(tt.file), tt.opts)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to start with %q", err, tt.want)
			}
			if !errors.Is(err, floodgate.ErrInvalidOption) {
				t.Errorf("error %q does not wrap ErrInvalidOption", err)
			}
		})
	}
}

// passBotCheck is a bot check that lets every request through.
func passBotCheck(BotCheckSpec, []netip.Prefix) (func(http.Handler) http.Handler, error) {
	return func(h http.Handler) http.Handler { return h }, nil
}

// TestExamplePolicyFiles: the files shipped with the example server
// parse and build.
func TestExamplePolicyFiles(t *testing.T) {
	paths, err := filepath.Glob("../../examples/server/policies*.json")
	if err != nil || len(paths) != 3 {
		t.Fatalf("example policy files: %v, %v; want 3", paths, err)
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		opts := PolicyOptions{Logger: discardLogger()}
		if strings.Contains(string(data), `"botCheck"`) {
			opts.BotCheck, opts.RequireBotCheck = passBotCheck, true
		}
		if _, err := NewPolicyServer(data, opts); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
