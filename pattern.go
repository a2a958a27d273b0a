package floodgate

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits of NormalizePattern.
const (
	// maxPatternInput bounds the work on one input, in bytes.
	maxPatternInput = 1024
	// minPatternLetters is the fewest non-digit characters a pattern
	// needs: a shorter stem ("ab{NUM}") is shared by too many honest
	// users to single out a macro.
	minPatternLetters = 3
	// maxPatternTokens is the most characters a pattern may have, each
	// digit run counting as one.
	maxPatternTokens = 64
)

// numPlaceholder replaces each run of digits in a pattern.
const numPlaceholder = "{NUM}"

// NormalizePattern reduces a user-chosen name, such as a nickname at
// sign-up, to the pattern a macro varies it by, so that abc1, abc2 and
// abc999 share one limit under the key "abc{NUM}". It is usable from
// business code and, through KeyByPattern, as a KeyFunc. The rules, in
// order:
//
//  1. Input over 1024 bytes, not valid UTF-8, or holding a private-use
//     (Co), unassigned or noncharacter code point forms no pattern: such a
//     character has no agreed look, so each of the 137,000 private-use
//     code points alone could otherwise mint a fresh pattern.
//  2. White space, control and format characters (zero-width space and
//     joiners, BOM, soft hyphen, bidi marks), variation selectors, the
//     other default-ignorable characters (such as the Hangul fillers), the
//     Braille blank, and combining and enclosing marks (categories Mn and
//     Me: an accent written as its own character, the keycap U+20E3) are
//     dropped wherever they are: they are invisible or sit on another
//     character, so "a b c 1", "abc\u200b1", "abc1\u0301" and
//     "abc1\ufe0f\u20e3" are abc1. Trimming is a special case.
//  3. Fullwidth ASCII forms fold to ASCII ("ａｂｃ１" is abc1), and case
//     folds by Unicode simple case folding ("ABC", "Abc" and the Kelvin
//     sign's "K" variants agree), the result in lower case.
//  4. Each run of numbers (Unicode category N: ASCII and other decimal
//     digits, superscripts, circled and Roman numerals) becomes {NUM}; a
//     dropped character inside a run does not split it.
//  5. Literal braces are doubled ("{" is "{{", "}" is "}}"), so a
//     user cannot type "{NUM}" to land in another pattern's bucket: the
//     literal name "abc{NUM}" normalizes to "abc{{num}}".
//  6. A pattern needs at least 3 characters other than digits (a
//     shorter stem is shared by too many honest users) and at most 64
//     characters, each digit run counting as one; otherwise, and for an
//     empty or digits-only name, ok is false and the caller should fall
//     back to another key (the client IP, say).
//
// Other punctuation is kept: "abc_1" and "abc-1" are different patterns.
// Without golang.org/x/text, canonical equivalence is not applied: a
// precomposed "é" stays é while "e" with a combining accent becomes e;
// look-alike letters from other scripts (Cyrillic "а" for Latin "a") are
// not folded either. Dropping marks costs precision, never safety: in
// scripts that write vowels as nonspacing marks (Devanagari, Thai) more
// names share a pattern, and so a limit.
//
// Because of rule 5, normalizing a pattern again escapes its braces once
// more; what is stable is its meaning: a name spelled like the pattern,
// with a digit for each {NUM}, normalizes to the same pattern.
func NormalizePattern(s string) (pattern string, ok bool) {
	if len(s) > maxPatternInput || !utf8.ValidString(s) {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(s) + len(numPlaceholder))
	tokens, letters, inNum := 0, 0, false
	for _, r := range s {
		switch {
		case refused(r):
			return "", false
		case ignorable(r):
			continue
		}
		r = foldRune(r)
		if unicode.IsNumber(r) {
			if !inNum {
				b.WriteString(numPlaceholder)
				tokens++
				inNum = true
			}
			continue
		}
		inNum = false
		tokens, letters = tokens+1, letters+1
		switch r {
		case '{':
			b.WriteString("{{")
		case '}':
			b.WriteString("}}")
		default:
			b.WriteRune(r)
		}
	}
	if letters < minPatternLetters || tokens > maxPatternTokens {
		return "", false
	}
	return b.String(), true
}

// ignorable reports a character that NormalizePattern drops: invisible,
// or a mark on another character.
func ignorable(r rune) bool {
	if r < utf8.RuneSelf {
		return r <= ' ' || r == 0x7f // controls and the space
	}
	return unicode.IsSpace(r) ||
		unicode.In(r, unicode.Cc, unicode.Cf, unicode.Mn, unicode.Me, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) ||
		r == '\u2800' // Braille pattern blank: renders as a space, often abused as one
}

// refused reports a code point that forms no pattern: private use, or
// not assigned in the Unicode tables of this Go release (noncharacters
// included). Go has no table of unassigned code points (its unicode.C
// includes them): they are those in no other general category.
func refused(r rune) bool {
	if r < utf8.RuneSelf {
		return false
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Cs)
}

// foldRune folds a fullwidth ASCII form to ASCII, then maps r to a single
// representative of its simple case-folding orbit, so that every member
// of an orbit (K, k and U+212A KELVIN SIGN, say) agrees: the orbit's
// smallest member, taken to upper and then lower case. The round trip
// matters for orbits whose smallest member is not a letter: Greek iota's
// includes U+0345 COMBINING YPOGEGRAMMENI, which must come out as ι.
func foldRune(r rune) rune {
	if '\uFF01' <= r && r <= '\uFF5E' {
		r -= 0xFEE0
	}
	m := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		m = min(m, f)
	}
	return unicode.ToLower(unicode.ToUpper(m))
}

// KeyByPattern returns a KeyFunc that normalizes the key of src with
// NormalizePattern: KeyByPattern(nickname), where nickname is
// KeyByJSONField("nickname", 4<<10), keys a sign-up by its nickname
// pattern. When src yields a key from which no pattern can be formed the
// error wraps ErrNoKey, so a PolicySelector falls back to its next policy;
// errors of src are passed on. A nil src (what a constructor returns with
// its error) is an error wrapping ErrInvalidOption.
func KeyByPattern(src KeyFunc) (KeyFunc, error) {
	if src == nil {
		return nil, keyArgError("KeyByPattern", "nil key function: check the error of the constructor that built it")
	}
	return func(r *http.Request) (string, error) {
		k, err := src(r)
		if err != nil {
			return "", err
		}
		p, ok := NormalizePattern(k)
		if !ok {
			return "", fmt.Errorf("%w: no pattern can be formed from the key", ErrNoKey)
		}
		return p, nil
	}, nil
}
