package redisstore

import (
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate"
)

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise.
// Two limiters that share a prefix share their clients' state, so give
// each policy its own (e.g. "fg:signup", "fg:probe").
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

// clientTag returns "p:{escaped k}:", the part every key of k starts with.
func clientTag(prefix, key string) string {
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
	return prefix + ":{" + esc + "}:"
}

// checkPrefix refuses a prefix that contains a brace: it would become the
// hash tag in place of the client key.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: prefix %q must not contain '{' or '}'", floodgate.ErrInvalidOption, p)
	}
	return nil
}
