package floodgate

import (
	"math"
	"math/bits"
)

// debt is what a key's state owes, in the few numbers the debt memory
// keeps: at is a time (ns since the limiter's epoch) and amt a count of
// up to 26 bits, both meaning what the key's algorithm makes of them (see
// each algorithm's debt and restore; an algorithm may pack more of its
// state into them than a time and a count, as long as these rules hold).
// A state owes nothing once at has passed (see owes): at is no earlier
// than the first time at which the state equals a fresh one. And a
// shared debt, the elementwise maximum of several (see max), is restored
// to a state that allows no more, at any time, than the state restored
// from any debt no larger in both numbers, so that a bound merged from
// several keys' debts binds each of them. A debt the memory rounded up
// (see debts) is restored as a shared one, by the same rule.
type debt struct {
	at  int64
	amt uint32
	// shared marks a bound merged from several keys' debts (see debts),
	// or a debt rounded up, which is restored by the rule above, never
	// as one key's own exact debt.
	shared bool
	// keep asks the memory to keep the debt exactly, never rounded: a
	// sliding log's debt beyond its limit, whose restore reads its time
	// to the unit (see SlidingLog's restore).
	keep bool
}

// owes reports whether the debt still limits the key at now: at is the
// first time at which the key's state equals a fresh one.
func (v debt) owes(now int64) bool { return v.at > now }

// max returns the elementwise maximum of two debts, a shared debt: an
// upper bound of both (see debt).
func (v debt) max(w debt) debt {
	return debt{at: max(v.at, w.at), amt: max(v.amt, w.amt), shared: true}
}

// debts is a shard's fixed-size memory of the keys it had to drop while
// they still held state (live evictions), so that an attacker cannot buy
// a reset by spraying keys until the key it wants freed is pushed out,
// and so that an honest key pushed out by a spray comes back owing what
// it spent (exactly while the memory has room, or for a sliding log as
// closely as its debt can say: see SlidingLog's restore).
//
// It is a cuckoo table of 8-byte words: each key has two buckets of
// debtWords words (a cache line), and an entry takes one or two of them.
// While there is room, a debt takes two (an exact entry): its 64-bit time
// and 26-bit amount exactly, under a 36-bit fingerprint of the key's hash.
// Under pressure a debt takes one (a rounded entry): a 28-bit fingerprint,
// its time rounded up to a tick of 2^13 ns or more (less than 2^-15 of
// how far it lies beyond the memory's base, a time at most rebaseAfter
// old, see encodeTime) and its amount rounded up to 10 significant bits;
// it is restored as a shared bound (see debt), never to less than the
// key owed. An exact entry is made rounded (demoted) only to make room
// for another debt, so that every debt keeps an entry of its own for as
// long as the words go round. A key's own entry is the whole truth about
// it. When both buckets are full, entries are moved to their other bucket
// to make room (at most maxKicks moves); only when that fails does a debt
// lose its own entry: by default it is merged into its bucket's shared
// bound (an exact entry with fingerprint 0, the elementwise maximum of
// the debts merged there), which from then on also binds the keys of
// that bucket that have no entry of their own — a stranger may wait, but
// no debt is forgotten. With WithForgetOverflow the debt that ends
// soonest is forgotten instead.
//
// A rounded entry is a bound of the keys whose hashes share its 28-bit
// fingerprint and buckets (a fresh key does with a chance below 2^-24 on
// a full memory): it is only ever raised, never lowered or freed before
// it runs out, except by a Reset of such a key, and a key that finds one
// starts from it. So a key that comes back from a rounded entry leaves it
// in place, a refund while it is remembered is not given back, and two
// keys that share it are both bound by the larger debt: neither is ever
// forgiven. A debt to be kept exactly (debt.keep: a sliding log's, an
// interval bucket's) is never rounded: its store has twice the words.
//
// Entries whose debt has run out are free again, so the memory heals as
// the debts end. An entry with the marker amount shields a key from the
// shared bounds of its buckets until every debt the memory held when it
// was written has ended (so also from those debts merged there later):
// it is written when the key is reset while the memory holds any running
// debt (Reset is durable), and when the key comes back owing nothing of
// its own, or less than a shared bound that binds its buckets. A shield
// is never dropped while a debt of its buckets can give way instead, and
// no debt is dropped to keep a shield (see overflow).
type debts struct {
	buckets []debtBucket
	// until is the latest time written: from then on every entry has run
	// out and a lookup can be skipped, which keeps the miss path of a
	// store that rarely evicts live free of the bucket's cache lines.
	until int64
	// base is the time the rounded entries' times count from: the time
	// of a write, moved up by rebase once it is rebaseAfter old.
	base int64
	// forget drops a debt that finds no room (WithForgetOverflow)
	// instead of merging it into a shared bound.
	forget bool
	// rng picks the entry a full bucket moves out (xorshift).
	rng uint64
	// failed and failedExact count insertions in a row that found no
	// word for a rounded entry, and no room for an exact one, up to 4:
	// each one halves the moves of the next (see maxKicks), since in a
	// table that is full every move is in vain.
	failed, failedExact int
	// merged and forgotten count debts that lost their own entry.
	merged, forgotten uint64
}

const (
	// debtWords words of 8 bytes fill one 64-byte bucket, a cache line.
	debtWords = 8
	// debtWays is the exact entries a bucket holds: its pairs of words
	// (an exact entry takes words 2w and 2w+1).
	debtWays = debtWords / 2
)

type debtBucket [debtWords]uint64

// The words of an entry. An exact entry's first word is its time, its
// second exactBit, the fingerprint (fpBits, 0 for a shared bound) and
// the amount (amtBits). A rounded entry's word is roundedBit, its
// fingerprint's top rfpBits, and the rounded time and amount (see
// encodeTime, encodeAmt). A zero word of a pair that holds no exact
// entry is free. A pair holds an exact entry when its second word is
// not zero and not rounded.
const (
	amtBits = 26
	amtMask = 1<<amtBits - 1
	// markerAmt is the amount of a shield (see debts); no algorithm's
	// amount reaches it (a bucket's at most maxLimit, a counter's packed
	// sum below 2^26 - 2^24, a log's at most its ahead amount: see
	// TestDebtAmountsFitTheMemory).
	markerAmt = amtMask
	// maxKicks bounds the entries one insertion moves, halved for each
	// insertion before it that failed (see debts.failed).
	maxKicks = 64

	roundedBit = 1 << 63
	exactBit   = 1 << 62
	keepBit    = 1 << 61 // an exact entry never to be rounded (debt.keep)
	fpBits     = 35
	fpMask     = 1<<fpBits - 1
	rfpBits    = 28
	rfpMask    = 1<<rfpBits - 1
	rfpShift   = rAmtBits + rtGBits + rtQBits // a rounded word's fingerprint, above its time and amount

	// A rounded time is q ticks of 2^g ns after the base's tick, with g
	// in rtGMin..rtGMin+31 (rtGBits) the smallest for which q fits in
	// rtQBits (see encodeTime).
	rtGMin  = 13
	rtGBits = 5
	rtQBits = 16
	// A rounded amount is a float of rAmtMant bits of mantissa below an
	// exponent, rAmtBits in all (see encodeAmt); rMarker is a shield's.
	rAmtBits = 14
	rAmtMant = 9
	rMarker  = 1<<rAmtBits - 1
	// rebaseAfter is how old the base may grow before the next write
	// moves it up to its time (see rebase): about a second, so that a
	// rounded time is off by less than 2^-15 of the debt's remaining time
	// and a second, or 2^13 ns.
	rebaseAfter = 1 << 30
)

// DefaultDebtsPerKey is the room of the debt memory, in words of 8 bytes
// per key of WithMaxKeys, unless WithDebtMemory says otherwise: 64 bytes
// a key. A debt takes two words (exact) while there is room, one (rounded
// up) under pressure: after a spray of up to about eight times WithMaxKeys
// distinct keys that each spent their quota, every debt still has an
// entry of its own, so no stranger waits (see WithDebtMemory for the
// figures).
const DefaultDebtsPerKey = 8

// maxDebtsPerKey bounds WithDebtMemory.
const maxDebtsPerKey = 64

// debtItem is an entry read from its words: fp is its fingerprint (a
// rounded entry's top rfpBits, the bits below zero; 0 for a shared
// bound), v its debt (a rounded entry's rounded up and shared).
type debtItem struct {
	fp      uint64
	v       debt
	rounded bool
}

func (it debtItem) marker() bool { return it.v.amt == markerAmt && it.fp != 0 }

// rfp returns the fingerprint bits a rounded entry keeps of fp; the
// second bucket is derived from them.
func rfp(fp uint64) uint64 { return fp >> (fpBits - rfpBits) }

// exact reports whether pair w of b holds an exact entry.
func (b *debtBucket) exact(w int) bool {
	m := b[2*w+1]
	return m != 0 && m&roundedBit == 0
}

func (b *debtBucket) exactItem(w int) debtItem {
	m := b[2*w+1]
	fp := m >> amtBits & fpMask
	return debtItem{fp: fp, v: debt{at: int64(b[2*w]), amt: uint32(m & amtMask), shared: fp == 0, keep: m&keepBit != 0}}
}

func (b *debtBucket) setExact(w int, it debtItem) {
	m := exactBit | it.fp<<amtBits | uint64(it.v.amt&amtMask)
	if it.v.keep {
		m |= keepBit
	}
	b[2*w], b[2*w+1] = uint64(it.v.at), m
}

// newDebts returns a memory of n buckets; seed starts its random moves.
func newDebts(n int, forget bool, seed uint64) *debts {
	return &debts{buckets: make([]debtBucket, n), until: math.MinInt64, base: math.MinInt64, forget: forget, rng: seed | 1}
}

// place returns h's two buckets and its fingerprint, whose rounded bits
// are never 0. The fingerprint mixes every bit of h, so keys that share a
// bucket differ in it; the second bucket is derived from the first and
// the rounded fingerprint alone, so that an entry of either kind can be
// moved without its key.
func (d *debts) place(h uint64) (b1, b2 uint32, fp uint64) {
	n := uint64(len(d.buckets))
	b1 = uint32((h >> 16 & 0xffffffff) * n >> 32)
	fp = (h * 0x9e3779b97f4a7c15) >> (64 - fpBits)
	if rfp(fp) == 0 {
		fp |= 1 << (fpBits - rfpBits)
	}
	return b1, d.other(b1, fp), fp
}

// other returns the bucket of an entry with fingerprint fp that is not b
// (b itself when both are the same): other(other(b)) == b.
func (d *debts) other(b uint32, fp uint64) uint32 {
	n := uint32(len(d.buckets))
	x := uint32((rfp(fp) * 0xc2b2ae3d27d4eb4f >> 32) * uint64(n) >> 32)
	if x >= b {
		return x - b
	}
	return x + n - b
}

// encodeTime returns at, a time after the base, rounded up to a tick of
// 2^g ns: g (above) and the ticks q from the base's tick (below), g the
// smallest from rtGMin for which q fits, so that the tick is below
// 2^-15 of at - base (or 2^rtGMin). Ticks are whole multiples of 2^g ns,
// so a time rounded once is rounded no further when the base moves up
// (see rebase). ok is false for a time too far out to hold: 2^60 ns
// (36 years) or more after the base, beyond MaxDebtLimit and a period.
func encodeTime(at, base int64) (t uint64, ok bool) {
	if at <= base {
		return 0, false
	}
	g := max(rtGMin, bits.Len64(uint64(at-base))-rtQBits)
	for ; g < rtGMin+1<<rtGBits; g++ {
		hi := -(-at >> g) // at / 2^g, rounded up
		if q := hi - base>>g; q < 1<<rtQBits {
			if hi > math.MaxInt64>>g {
				return 0, false
			}
			return uint64(g-rtGMin)<<rtQBits | uint64(q), true
		}
	}
	return 0, false
}

func decodeTime(t uint64, base int64) int64 {
	g := uint(t>>rtQBits) + rtGMin
	return (base>>g + int64(t&(1<<rtQBits-1))) << g
}

// encodeAmt returns a, rounded up to rAmtMant+1 significant bits (exact
// below 2^rAmtMant): an exponent e above the bits after the leading one.
// A shield's amount has a code of its own.
func encodeAmt(a uint32) uint64 {
	switch {
	case a == markerAmt:
		return rMarker
	case a < 1<<rAmtMant:
		return uint64(a)
	}
	e := uint(bits.Len32(a)) - rAmtMant // >= 1
	m := (uint64(a) + 1<<(e-1) - 1) >> (e - 1)
	if m == 1<<(rAmtMant+1) {
		m, e = m>>1, e+1
	}
	return uint64(e)<<rAmtMant | m&(1<<rAmtMant-1)
}

// decodeAmt returns the amount of code c, at least the amount encoded,
// and below a shield's unless c is a shield's.
func decodeAmt(c uint64) uint32 {
	e, m := c>>rAmtMant, c&(1<<rAmtMant-1)
	switch {
	case c == rMarker:
		return markerAmt
	case e == 0:
		return uint32(m)
	}
	return uint32(min((1<<rAmtMant|m)<<(e-1), markerAmt-1))
}

// roundedWord returns it as a rounded entry, its time and amount
// rounded up; ok is false if its time cannot be held (see encodeTime).
// The base must be current (see rebase).
func (d *debts) roundedWord(it debtItem) (w uint64, ok bool) {
	t, ok := encodeTime(it.v.at, d.base)
	if !ok || it.v.keep {
		return 0, false
	}
	d.until = max(d.until, decodeTime(t, d.base))
	return roundedBit | rfp(it.fp)<<rfpShift | t<<rAmtBits | encodeAmt(it.v.amt), true
}

func (d *debts) roundedItem(w uint64) debtItem {
	return debtItem{
		fp:      (w >> rfpShift & rfpMask) << (fpBits - rfpBits),
		v:       debt{at: d.roundedAt(w), amt: decodeAmt(w & (1<<rAmtBits - 1)), shared: true},
		rounded: true,
	}
}

func (d *debts) roundedAt(w uint64) int64 {
	return decodeTime(w>>rAmtBits&(1<<(rtGBits+rtQBits)-1), d.base)
}

// rebase moves the base up to now once it is rebaseAfter old, so that
// rounded times stay close to the debts' (see encodeTime): every rounded
// entry is written again from the new base, exactly (its time is a whole
// number of its ticks, and its new tick is no coarser), and those that
// have run out are freed. It costs one pass over the memory a second
// at most, and only while debts are written.
func (d *debts) rebase(now int64) {
	if d.base != math.MinInt64 && now-d.base < rebaseAfter {
		return
	}
	old := d.base
	d.base = now
	if old == math.MinInt64 {
		return // nothing was rounded yet
	}
	for b := range d.buckets {
		bk := &d.buckets[b]
		for w := range debtWays {
			if bk.exact(w) {
				continue
			}
			for i := 2 * w; i < 2*w+2; i++ {
				if bk[i] == 0 {
					continue
				}
				at := decodeTime(bk[i]>>rAmtBits&(1<<(rtGBits+rtQBits)-1), old)
				t, ok := encodeTime(at, now)
				switch {
				case at <= now:
					bk[i] = 0
				case ok:
					bk[i] = bk[i]&^((1<<(rtGBits+rtQBits)-1)<<rAmtBits) | t<<rAmtBits
				}
			}
		}
	}
}

// found is what the memory knows of a key.
type found struct {
	// own is the last word of the key's own entry, running or not (a
	// rounded one only while it runs), in b from word i; nil if none.
	own     *uint64
	b       *debtBucket
	i       int
	rounded bool
	// v is own's debt: a rounded entry's rounded up, the largest of the
	// rounded entries the key finds.
	v     debt
	bound debt // the shared bounds of its buckets still running
}

// owed returns the debt the key starts from at now: its own when it has
// an entry (a shield, or a debt that has run out, owes nothing), else the
// shared bounds of its buckets. A key's debt is never both in its own
// entry and in a bound: it joins a bound only by losing its entry, and
// an entry is written only for a key whose state started from everything
// the memory held about it.
func (f found) owed(now int64) debt {
	switch {
	case f.own == nil:
		return f.bound
	case f.v.amt == markerAmt || !f.v.owes(now):
		return debt{}
	}
	return f.v
}

// find looks h up at now.
func (d *debts) find(h uint64, now int64) found {
	if now > d.until {
		return found{} // every entry has run out
	}
	return d.lookup(h, now)
}

func (d *debts) lookup(h uint64, now int64) found {
	var f found
	b1, b2, fp := d.place(h)
	d.scan(&d.buckets[b1], fp, now, &f)
	if b2 != b1 {
		d.scan(&d.buckets[b2], fp, now, &f)
	}
	return f
}

// scan adds what b holds of fp to f. An exact entry of fp's own comes
// first: rounded entries that share its rounded bits are other keys'
// (an exact entry is written only for a key that has no rounded one).
// Of several rounded entries, a debt outweighs a shield, and the debt
// found is the largest of them.
func (d *debts) scan(b *debtBucket, fp uint64, now int64, f *found) {
	for w := range debtWays {
		if b.exact(w) {
			switch it := b.exactItem(w); {
			case it.fp == fp:
				*f = found{own: &b[2*w+1], b: b, i: 2 * w, v: it.v, bound: f.bound}
			case it.fp == 0 && it.v.owes(now):
				f.bound = f.bound.max(it.v)
			}
			continue
		}
		for i := 2 * w; i < 2*w+2; i++ {
			if b[i]&roundedBit == 0 || b[i]>>rfpShift&rfpMask != rfp(fp) || f.own != nil && !f.rounded {
				continue
			}
			it := d.roundedItem(b[i])
			switch {
			case !it.v.owes(now): // run out: free
			case f.own == nil, f.v.amt == markerAmt && !it.marker():
				f.own, f.b, f.i, f.rounded, f.v = &b[i], b, i, true, it.v
			case !it.marker():
				f.v = f.v.max(it.v)
			}
		}
	}
}

// put makes v h's debt at now: h's own entry when v owes; otherwise no
// entry, or a shield while a shared bound binds h (a key that comes back
// owing nothing of its own, or less than its buckets' bounds). A rounded
// entry of h's is only raised (see debts): a debt below it (a refund
// while h is remembered) is lost; one to be kept exactly replaces it.
func (d *debts) put(h uint64, v debt, now int64) {
	f := d.lookup(h, now)
	switch {
	case f.rounded && v.keep:
		// Kept exactly: it replaces the rounded entries h finds, and
		// bounds them.
		b1, b2, fp := d.place(h)
		if f.v.amt != markerAmt { // a shield bounds nothing
			v = f.v.max(v)
		}
		d.freeRounded(h, now)
		d.until = max(d.until, v.at)
		d.insert(b1, b2, debtItem{fp: fp, v: debt{at: v.at, amt: v.amt, keep: true}}, now)
		return
	case f.rounded:
		if v.owes(now) {
			d.raise(f, v, now)
		}
		return
	case !v.owes(now) && !f.bound.owes(now):
		if f.own != nil {
			f.b[f.i], f.b[f.i+1] = 0, 0
		}
		return
	}
	d.write(h, f, v, now)
}

// raise makes f's rounded entry at least v: a shield becomes v, a debt
// the larger of both.
func (d *debts) raise(f found, v debt, now int64) {
	d.rebase(now)
	if f.v.amt != markerAmt {
		v = f.v.max(v)
	}
	it := d.roundedItem(*f.own)
	it.v = debt{at: v.at, amt: v.amt}
	d.until = max(d.until, v.at)
	if w, ok := d.roundedWord(it); ok {
		*f.own = w
	}
}

// reset frees h at now for good: no debt the memory holds now binds it
// later, even one that loses its entry and is merged into a bound of h's
// buckets after the reset. While the memory holds any running debt, h
// gets a shield lasting until the last of them ends; a bound made only
// of debts that come later may bind it, as it may bind any new key.
// Every rounded entry h finds is freed: a key that shares one with h
// (see debts) loses it too, the price of a durable Reset.
func (d *debts) reset(h uint64, now int64) {
	d.freeRounded(h, now)
	f := d.lookup(h, now)
	if d.forget || now >= d.until {
		if f.own != nil {
			f.b[f.i], f.b[f.i+1] = 0, 0
		}
		return
	}
	d.write(h, f, debt{}, now)
}

// freeRounded frees the running rounded entries h finds.
func (d *debts) freeRounded(h uint64, now int64) {
	b1, b2, fp := d.place(h)
	for _, b := range []uint32{b1, b2} {
		bk := &d.buckets[b]
		for w := range debtWays {
			for i := 2 * w; i < 2*w+2 && !bk.exact(w); i++ {
				if bk[i]&roundedBit != 0 && bk[i]>>rfpShift&rfpMask == rfp(fp) && d.roundedAt(bk[i]) > now {
					bk[i] = 0
				}
			}
		}
	}
}

// write makes v h's own entry, or a shield if v owes nothing: f's exact
// entry of h's, or a new one. A shield lasts until every debt the memory
// holds now has ended (until): every debt that may ever be merged into a
// bound of h's buckets, up to the next one written.
func (d *debts) write(h uint64, f found, v debt, now int64) {
	if !v.owes(now) {
		v = debt{at: d.until, amt: markerAmt}
	}
	d.until = max(d.until, v.at)
	b1, b2, fp := d.place(h)
	it := debtItem{fp: fp, v: debt{at: v.at, amt: v.amt, keep: v.keep}}
	if f.own != nil {
		f.b.setExact(f.i/2, it)
		return
	}
	d.insert(b1, b2, it, now)
}

// insert places it, a new entry, in one of its buckets b1 and b2: exact
// in a free pair of either, or after moving exact entries to make room;
// failing that, rounded up in one word (see placeRounded).
func (d *debts) insert(b1, b2 uint32, it debtItem, now int64) {
	if d.takeExact(&d.buckets[b1], it, now) || d.takeExact(&d.buckets[b2], it, now) {
		return
	}
	b, it, ok := d.walkExact(b1, it, now)
	if !ok {
		d.placeRounded(b, it, now)
	}
}

// freePair reports whether pair w of b holds nothing that runs at now.
func (d *debts) freePair(b *debtBucket, w int, now int64) bool {
	if b.exact(w) {
		return !b.exactItem(w).v.owes(now)
	}
	return d.freeWord(b[2*w], now) && d.freeWord(b[2*w+1], now)
}

// freeWord reports whether word w of a pair without an exact entry is
// free: zero, or a rounded entry that has run out.
func (d *debts) freeWord(w uint64, now int64) bool { return w == 0 || d.roundedAt(w) <= now }

// takeExact puts it into a free pair of b, exact, if there is one.
func (d *debts) takeExact(b *debtBucket, it debtItem, now int64) bool {
	for w := range debtWays {
		if d.freePair(b, w, now) {
			b.setExact(w, it)
			return true
		}
	}
	return false
}

// walkExact places it exact in a bucket of its, starting at b, whose
// pairs are all taken. At each step it looks for an exact entry of b
// whose other bucket has a free pair, and moves it there to make room
// for it; if none has, it moves a random exact entry out for it and goes
// on with that entry from its other bucket, up to maxKicks steps. If it
// finds no room, it returns the entry left without one and its bucket.
func (d *debts) walkExact(b uint32, it debtItem, now int64) (uint32, debtItem, bool) {
	for range maxKicks >> d.failedExact {
		if d.shiftExact(b, it, now) {
			d.failedExact = 0
			return b, it, true
		}
		bk := &d.buckets[b]
		w := d.victimPair(bk)
		if w < 0 {
			break
		}
		out := bk.exactItem(w)
		bk.setExact(w, it)
		it, b = out, d.other(b, out.fp)
		if d.takeExact(&d.buckets[b], it, now) {
			d.failedExact = 0
			return b, it, true
		}
	}
	d.failedExact = min(d.failedExact+1, 4)
	return b, it, false
}

// shiftExact makes room for it in b by moving one of its exact entries
// (not its shared bound) to a free pair of that entry's other bucket, and
// reports whether it could.
func (d *debts) shiftExact(b uint32, it debtItem, now int64) bool {
	bk := &d.buckets[b]
	for w := range debtWays {
		if !bk.exact(w) {
			continue
		}
		if e := bk.exactItem(w); e.fp != 0 && d.takeExact(&d.buckets[d.other(b, e.fp)], e, now) {
			bk.setExact(w, it)
			return true
		}
	}
	return false
}

// victimPair returns a random pair of b holding an exact entry that may
// move (not its shared bound), or -1.
func (d *debts) victimPair(b *debtBucket) int {
	start := d.random(debtWays)
	for j := range debtWays {
		if w := (start + j) % debtWays; b.exact(w) && b.exactItem(w).fp != 0 {
			return w
		}
	}
	return -1
}

// victimWord returns a random rounded word of b, or -1.
func (d *debts) victimWord(b *debtBucket) int {
	start := d.random(debtWords)
	for j := range debtWords {
		if i := (start + j) % debtWords; !b.exact(i/2) && b[i]&roundedBit != 0 {
			return i
		}
	}
	return -1
}

func (d *debts) random(n int) int {
	d.rng ^= d.rng << 13
	d.rng ^= d.rng >> 7
	d.rng ^= d.rng << 17
	return int(d.rng>>32) % n
}

// placeRounded places it, an entry without room in b (a bucket of its),
// rounded up in one word: a free word of either of its buckets, or one
// freed by rounding an exact entry there (see demote). Failing both, it
// moves a random rounded entry out for it and goes on with that one from
// its other bucket, up to maxKicks steps, then lets a debt lose its entry
// (see overflow).
func (d *debts) placeRounded(b uint32, it debtItem, now int64) {
	d.rebase(now)
	w, ok := d.roundedWord(it)
	if !ok {
		d.overflow(b, it, now)
		return
	}
	for kick := 0; ; kick++ {
		alt := d.other(b, it.fp)
		if d.takeWord(&d.buckets[b], w, now) || d.takeWord(&d.buckets[alt], w, now) ||
			d.demote(&d.buckets[b], w, now) || d.demote(&d.buckets[alt], w, now) {
			d.failed = 0
			return
		}
		bk := &d.buckets[b]
		i := d.victimWord(bk)
		if i < 0 || kick >= maxKicks>>d.failed {
			break
		}
		w, bk[i] = bk[i], w
		it = d.roundedItem(w)
		b = d.other(b, it.fp)
	}
	d.failed = min(d.failed+1, 4)
	d.overflow(b, d.roundedItem(w), now)
}

// takeWord puts w into a free word of b, if there is one.
func (d *debts) takeWord(b *debtBucket, w uint64, now int64) bool {
	for p := range debtWays {
		switch {
		case b.exact(p):
			if !b.exactItem(p).v.owes(now) {
				b[2*p], b[2*p+1] = w, 0
				return true
			}
		case d.freeWord(b[2*p], now):
			b[2*p] = w
			return true
		case d.freeWord(b[2*p+1], now):
			b[2*p+1] = w
			return true
		}
	}
	return false
}

// demote rounds up an exact entry of b (not its shared bound) into one
// word of its pair, and puts w into the other, if b has one that can be
// rounded.
func (d *debts) demote(b *debtBucket, w uint64, now int64) bool {
	for p := range debtWays {
		if !b.exact(p) {
			continue
		}
		it := b.exactItem(p)
		if it.fp == 0 {
			continue
		}
		if r, ok := d.roundedWord(it); ok {
			b[2*p], b[2*p+1] = r, w
			return true
		}
	}
	return false
}

// entries calls f with the position (first word) and item of every
// entry of b, exact and rounded.
func (d *debts) entries(b *debtBucket, f func(i int, it debtItem)) {
	for p := range debtWays {
		if b.exact(p) {
			f(2*p, b.exactItem(p))
			continue
		}
		for i := 2 * p; i < 2*p+2; i++ {
			if b[i] != 0 {
				f(i, d.roundedItem(b[i]))
			}
		}
	}
}

// setAt puts it at position i of b, in place of the entry there: exact
// if that one is exact and it is not rounded, else rounded up in word i
// (freeing the pair's other word if that entry was exact). It reports
// false, changing nothing, if it cannot be held rounded.
func (d *debts) setAt(b *debtBucket, i int, it debtItem) bool {
	if i%2 == 0 && b.exact(i/2) {
		if !it.rounded {
			b.setExact(i/2, it)
			return true
		}
		w, ok := d.roundedWord(it)
		if ok {
			b[i], b[i+1] = w, 0
		}
		return ok
	}
	w, ok := d.roundedWord(it)
	if ok {
		b[i] = w
	}
	return ok
}

// overflow disposes of it, an entry for which no room was found in b, a
// full bucket of its. With WithForgetOverflow, the debt that ends soonest
// among it and b's is forgotten. Otherwise nothing is forgotten: a debt
// loses its entry by being merged into a shared bound of one of it's
// buckets (see merge), and a shield keeps its key free. Only when
// neither of its buckets holds a debt that can give way — both are full
// of shields, and for a shield it of a bound and shields too — does a
// shield give way: the one that ends soonest (see unshield).
func (d *debts) overflow(b uint32, it debtItem, now int64) {
	bk := &d.buckets[b]
	if d.forget {
		if s, v := d.soonest(bk); s >= 0 && it.v.at > v.at {
			d.setAt(bk, s, it)
		}
		d.forgotten++
		return
	}
	if d.merge(bk, it, now) {
		return
	}
	if alt := d.other(b, it.fp); alt != b && d.merge(&d.buckets[alt], it, now) {
		return
	}
	d.unshield(bk, it)
}

// soonest returns the position and debt of b's own debt that ends first
// (not a shield, not the bound), or -1.
func (d *debts) soonest(b *debtBucket) (int, debt) {
	s, sv := -1, debt{}
	d.entries(b, func(i int, it debtItem) {
		if it.fp != 0 && !it.marker() && (s < 0 || it.v.at < sv.at) {
			s, sv = i, it.v
		}
	})
	return s, sv
}

// boundPair returns the pair of b's shared bound, or -1.
func (b *debtBucket) boundPair() int {
	for w := range debtWays {
		if b.exact(w) && b.exactItem(w).fp == 0 {
			return w
		}
	}
	return -1
}

// mergeable returns the pair of b holding own debts only (no shield, no
// bound), the one whose latest debt ends soonest, that debt and how many
// debts the pair holds; -1 if none.
func (d *debts) mergeable(b *debtBucket) (p int, v debt, n int) {
	p = -1
	for w := range debtWays {
		m := debt{at: math.MinInt64}
		k, ok := 0, true
		d.entries(b, func(i int, it debtItem) {
			if i/2 == w {
				k++
				ok = ok && it.fp != 0 && !it.marker()
				m = debt{at: max(m.at, it.v.at), amt: max(m.amt, it.v.amt)}
			}
		})
		if ok && k > 0 && (p < 0 || m.at < v.at) {
			p, v, n = w, m, k
		}
	}
	return p, v, n
}

// merge makes room for it in b, a full bucket of its, by merging a debt
// into b's shared bound, and reports whether it could: if b has no bound,
// the pair whose debts end soonest becomes it; then the debt that ends
// sooner of it (a debt) and b's soonest loses its entry into the bound.
// A shield it needs an entry: it takes the soonest debt's.
func (d *debts) merge(b *debtBucket, it debtItem, now int64) bool {
	if b.boundPair() < 0 {
		p, v, n := d.mergeable(b)
		if p < 0 {
			return false // only shields
		}
		if it.marker() {
			others := 0
			d.entries(b, func(i int, e debtItem) {
				if i/2 != p && e.fp != 0 && !e.marker() {
					others++
				}
			})
			if others == 0 {
				return false // no debt can give its entry and still be bound
			}
		}
		b.setExact(p, debtItem{v: v})
		d.merged += uint64(n)
	}
	s, sv := d.soonest(b)
	if it.marker() && s < 0 {
		return false
	}
	if s >= 0 && (it.marker() || it.v.at > sv.at) {
		out := d.item(b, s)
		if d.setAt(b, s, it) {
			it = out
		} else if it.marker() {
			return false
		}
	}
	d.lose(b, it.v)
	return true
}

// item returns the entry at position i of b.
func (d *debts) item(b *debtBucket, i int) debtItem {
	if i%2 == 0 && b.exact(i/2) {
		return b.exactItem(i / 2)
	}
	return d.roundedItem(b[i])
}

// unshield makes room in b, a full bucket of shields and possibly a
// bound, for it, when no debt of its buckets can give way (see overflow):
// the shield that ends soonest, its or b's, is dropped; a debt it takes
// that shield's place as its own entry. The key of the dropped shield
// may then be bound by the bounds of its buckets, as any new key is: the
// price of forgetting no debt.
func (d *debts) unshield(b *debtBucket, it debtItem) {
	s, sv := -1, debt{}
	d.entries(b, func(i int, e debtItem) {
		if e.marker() && (s < 0 || e.v.at < sv.at) {
			s, sv = i, e.v
		}
	})
	switch {
	case s < 0: // no shield either: only a debt too far out to round (see encodeTime)
		if w := b.boundPair(); w >= 0 && !it.marker() {
			d.lose(b, it.v)
		}
	case it.marker():
		if it.v.at > sv.at {
			d.setAt(b, s, it)
		}
	case !d.setAt(b, s, it):
		// Not to be rounded (see debt.keep): its shield's pair becomes
		// b's bound, with the debt the pair's other word may hold.
		v := debt{at: it.v.at, amt: it.v.amt}
		d.merged++
		d.entries(b, func(i int, e debtItem) {
			if i/2 == s/2 && !e.marker() {
				v = debt{at: max(v.at, e.v.at), amt: max(v.amt, e.v.amt)}
				d.merged++
			}
		})
		b.setExact(s/2, debtItem{v: v})
	}
}

// lose merges v, a debt that lost its entry in b, into b's shared bound.
func (d *debts) lose(b *debtBucket, v debt) {
	d.merged++
	w := b.boundPair()
	m := v.max(b.exactItem(w).v)
	b.setExact(w, debtItem{v: debt{at: m.at, amt: m.amt}})
}

// remap replaces every debt the memory holds, its own entries' and its
// shared bounds', by f of it (a bound or a rounded entry is passed with
// shared set), at now: after a change of rate, each in the units of the
// new one, a rounded entry rounded up again. An entry that owes nothing
// afterwards is freed; a shield lasts, as when it was written, until
// every debt the memory holds afterwards has ended (see write), and goes
// when none runs.
func (d *debts) remap(f func(debt) debt, now int64) {
	d.rebase(now)
	d.until = math.MinInt64
	type kept struct {
		b  *debtBucket
		it debtItem
	}
	var bind []kept
	for b := range d.buckets {
		bk := &d.buckets[b]
		d.entries(bk, func(i int, it debtItem) {
			switch {
			case !it.v.owes(now):
				d.free(bk, i)
			case !it.marker():
				it.v = f(it.v)
				if !it.v.owes(now) {
					d.free(bk, i)
					return
				}
				it.v.shared = false
				d.until = max(d.until, it.v.at)
				if !d.setAt(bk, i, it) {
					// A rounded entry whose debt is now to be kept
					// exactly (see debt.keep): its key's whole fingerprint
					// is not known, so it joins its bucket's bound.
					d.free(bk, i)
					bind = append(bind, kept{bk, it})
				}
			}
		})
	}
	for _, k := range bind {
		k.it.rounded = true // never an exact entry of a fingerprint cut short
		if !d.merge(k.b, k.it, now) {
			d.unshield(k.b, k.it)
		}
	}
	for b := range d.buckets {
		bk := &d.buckets[b]
		d.entries(bk, func(i int, it debtItem) {
			switch {
			case !it.marker():
			case d.until > now:
				it.v.at = d.until
				d.setAt(bk, i, it)
			default:
				d.free(bk, i)
			}
		})
	}
}

// free frees the entry at position i of b.
func (d *debts) free(b *debtBucket, i int) {
	if i%2 == 0 && b.exact(i/2) {
		b[i+1] = 0
	}
	b[i] = 0
}
