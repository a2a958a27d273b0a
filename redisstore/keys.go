package redisstore

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
// Two limiters of one algorithm that share a prefix share their clients'
// state, whatever their rates, so give each policy its own (e.g.
// "fg:signup", "fg:probe"). floodgate's selectors, route tables and All
// refuse two such limiters (see Namespace); limiters used side by side
// in business code are not checked.
const DefaultPrefix = "floodgate"

// Key layout. A client key k of a limiter with prefix p is stored in one
// key:
//
//	p:{k}:tb     token bucket (a string "tat frac")
//	p:{k}:log    sliding log (a sorted set: one member per recorded
//	             decision, named by the running total of the units and
//	             scored by its time, and the member "low")
//	p:{k}:sc     sliding counter (a string "w prev cur")
//	p:{k}:if     in-flight limit (a hash: holder -> "slots expiry", one
//	             field per instance holding slots of k; p:{%}:if for the
//	             whole service)
//
// One key per client, so that a maxmemory eviction takes a client's whole
// state or none of it (never a log without its totals), and a Cluster
// reshard moves it atomically: a script over one key is never refused with
// TRYAGAIN while its slot migrates, it runs on the node that holds the
// key, or is redirected (ASK) to it.
//
// Only the client part stands inside the braces, the Redis Cluster hash
// tag: each decision is a single-slot script, while different clients
// spread over all slots (a constant inside the braces would put every
// client on one node). Braces in k would move the tag, so '%', '{' and '}'
// are percent-escaped, which keeps the mapping one-to-one; the empty key
// is written as a lone '%', which no escaped key can be.

// clientKey returns the key of kind (e.g. "tb") of client key k,
// "p:{escaped k}:kind", in one allocation (the decision path makes one
// per call); with kind "" it is the part every key of k starts with.
func clientKey(prefix, key, kind string) string {
	esc := key
	switch {
	case key == "":
		esc = "%"
	case strings.ContainsAny(key, "%{}"):
		var b strings.Builder
		b.Grow(len(key) + 8)
		for i := 0; i < len(key); i++ {
			switch c := key[i]; c {
			case '%':
				b.WriteString("%25")
			case '{':
				b.WriteString("%7B")
			case '}':
				b.WriteString("%7D")
			default:
				b.WriteByte(c)
			}
		}
		esc = b.String()
	}
	return prefix + ":{" + esc + "}:" + kind
}

// checkPrefix refuses a prefix that contains a brace: it would become the
// hash tag in place of the client key.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: prefix %q must not contain '{' or '}'", floodgate.ErrInvalidOption, p)
	}
	return nil
}

// keySpace is the Namespace of a limiter whose key for client "*" is
// pattern: two limiters with one prefix and one key suffix (one
// algorithm) write the same keys, whatever their rates or clients.
func keySpace(pattern string) string {
	return fmt.Sprintf("redis keys %q", pattern)
}
