package floodgate

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestCoversAgainstBruteForce: covers agrees with checking each address of
// a /24 against random lists of prefixes inside, around and beside it.
func TestCoversAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	target := netip.MustParsePrefix("192.0.2.0/24")
	covered := 0
	for range 20000 {
		var list []netip.Prefix
		for range rng.IntN(24) {
			b := [4]byte{192, 0, 2, byte(rng.IntN(256))}
			if rng.IntN(20) == 0 {
				b[2] = 3 // beside the target
			}
			bits := 25 + rng.IntN(4) // pieces, most of the time
			if rng.IntN(8) == 0 {
				bits = 22 + rng.IntN(11)
			}
			list = append(list, netip.PrefixFrom(netip.AddrFrom4(b), bits).Masked())
		}
		want := true
		for i := range 256 {
			a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
			in := false
			for _, p := range list {
				in = in || p.Contains(a)
			}
			want = want && in
		}
		if want {
			covered++
		}
		if got := covers(list, target); got != want {
			t.Fatalf("covers(%v, %v) = %v; want %v", list, target, got, want)
		}
	}
	t.Logf("%d of 20000 lists cover the target", covered)
	if covered < 1000 || covered > 19000 {
		t.Fatalf("%d of 20000 lists cover the target: the test would not tell", covered)
	}
}

func TestLastAddr(t *testing.T) {
	for p, want := range map[string]string{
		"0.0.0.0/0":      "255.255.255.255",
		"10.0.0.0/8":     "10.255.255.255",
		"192.0.2.7/32":   "192.0.2.7",
		"::/0":           "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"2000::/3":       "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"::ffff:0:0/96":  "::ffff:255.255.255.255",
		"2001:db8::/127": "2001:db8::1",
	} {
		if got := lastAddr(netip.MustParsePrefix(p)); got != netip.MustParseAddr(want) {
			t.Errorf("lastAddr(%s) = %v; want %s", p, got, want)
		}
	}
}
