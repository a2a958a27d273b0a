package floodgate

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestNormalizePattern(t *testing.T) {
	tests := []struct {
		rule string
		in   string
		want string // "" means ok == false
	}{
		{"digit run", "abc1", "abc{NUM}"},
		{"digit run", "abc2", "abc{NUM}"},
		{"digit run", "abc999", "abc{NUM}"},
		{"each run", "a1b22c333", "a{NUM}b{NUM}c{NUM}"},
		{"leading digits", "2024abc", "{NUM}abc"},
		{"no digits", "abc", "abc"},
		{"case", "ABC1", "abc{NUM}"},
		{"case", "AbC77", "abc{NUM}"},
		{"kelvin sign", "\u212Aid1", "kid{NUM}"},
		{"long s", "\u017Fam1", "sam{NUM}"},
		{"greek final sigma", "ΣΟΦΙΑ1", "σοφια{NUM}"},
		{"fullwidth", "ａｂｃ１２", "abc{NUM}"},
		{"fullwidth capitals", "ＡＢＣ３", "abc{NUM}"},
		{"arabic-indic digits", "abc\u0661\u0662", "abc{NUM}"},
		{"superscript", "abc\u00b2", "abc{NUM}"},
		{"circled", "abc\u2460", "abc{NUM}"},
		{"roman numeral", "abc\u216b", "abc{NUM}"},
		{"mixed digit kinds are one run", "abc1\u00b2\uff13", "abc{NUM}"},
		{"trim", "  abc1 \t\n", "abc{NUM}"},
		{"inner space", "a b c 1", "abc{NUM}"},
		{"ideographic space", "abc\u30001", "abc{NUM}"},
		{"zero-width space", "ab\u200bc1", "abc{NUM}"},
		{"zero-width joiner and bom", "\ufeffab\u200dc1", "abc{NUM}"},
		{"soft hyphen", "ab\u00adc1", "abc{NUM}"},
		{"bidi override", "\u202eabc1", "abc{NUM}"},
		{"variation selector", "abc\ufe0f1", "abc{NUM}"},
		{"hangul filler", "\u3164abc1", "abc{NUM}"},
		{"braille blank", "abc\u28001", "abc{NUM}"},
		{"control", "abc\x001", "abc{NUM}"},
		{"dropped char inside a run", "abc1\u200b2", "abc{NUM}"},
		{"hangul", "철수네1", "철수네{NUM}"},
		{"punctuation kept", "abc_1", "abc_{NUM}"},
		{"punctuation kept", "abc-1", "abc-{NUM}"},
		{"braces escaped", "ab{c}1", "ab{{c}}{NUM}"},
		{"forged placeholder", "abc{NUM}", "abc{{num}}"},
		{"forged placeholder fullwidth", "abc｛NUM｝", "abc{{num}}"},
		{"forged escaped placeholder", "abc{{NUM}}", "abc{{{{num}}}}"},
		{"empty", "", ""},
		{"only spaces", "  \u200b ", ""},
		{"only digits", "12345", ""},
		{"only fullwidth digits", "１２３", ""},
		{"too short", "ab1", ""},
		{"too short after dropping", "a\u200bb 1", ""},
		{"shortest", "abc", "abc"},
		{"longest", strings.Repeat("a", 63) + "1", strings.Repeat("a", 63) + "{NUM}"},
		{"too long", strings.Repeat("a", 64) + "1", ""},
		{"long digit run counts once", "abc" + strings.Repeat("9", 500), "abc{NUM}"},
		{"input too large", "abc" + strings.Repeat(" ", 1022), ""},
		{"invalid utf-8", "abc\xff1", ""},
	}
	for _, tc := range tests {
		got, ok := NormalizePattern(tc.in)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: NormalizePattern(%q) = %q, %v; want %q", tc.rule, tc.in, got, ok, tc.want)
		}
	}
}

// TestNormalizePatternBucketsCollide: the variants a macro produces share
// one pattern; different stems do not.
func TestNormalizePatternBucketsCollide(t *testing.T) {
	same := []string{"abc1", "abc2", "abc999", "ABC3", "ａｂｃ４", " abc5 ", "a\u200bbc6"}
	for _, s := range same {
		if p, _ := NormalizePattern(s); p != "abc{NUM}" {
			t.Errorf("NormalizePattern(%q) = %q; want abc{NUM}", s, p)
		}
	}
	for _, s := range []string{"xyz1", "abd1", "abc_1", "1abc", "abc{NUM}", "abc{1}"} {
		if p, _ := NormalizePattern(s); p == "abc{NUM}" {
			t.Errorf("NormalizePattern(%q) = abc{NUM}; want another pattern", s)
		}
	}
}

// TestFoldRuneStable checks every code point: case variants fold alike,
// and a character NormalizePattern keeps folds to a fixed point that is
// kept again and is not a number, so
// normalizing a spelled-out pattern gives the same pattern (see
// renderPattern).
//
// It walks the first two planes: every character with a case mapping, and
// every fullwidth form, lies below U+20000 (the last cased letters, Adlam,
// end at U+1E943); the planes above hold ideographs and private use.
func TestFoldRuneStable(t *testing.T) {
	for r := rune(0); r < 0x20000; r++ {
		if !utf8.ValidRune(r) || ignorable(r) || refused(r) {
			continue
		}
		f := foldRune(r)
		if unicode.IsNumber(r) != unicode.IsNumber(f) {
			t.Fatalf("foldRune(%U) = %U changes number-ness", r, f)
		}
		if ignorable(f) || refused(f) || foldRune(f) != f || !utf8.ValidRune(f) {
			t.Fatalf("foldRune(%U) = %U is not a kept fixed point", r, f)
		}
		if g := foldRune(unicode.SimpleFold(r)); g != f {
			t.Fatalf("foldRune(%U) = %U, but its case variant %U folds to %U", r, f, unicode.SimpleFold(r), g)
		}
	}
}

// renderPattern spells a pattern out as a name: each {NUM} as a digit,
// each doubled brace as one. ok is false if p is not a well-formed pattern:
// a brace that is neither doubled nor part of {NUM}.
func renderPattern(p string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "{{"), strings.HasPrefix(p[i:], "}}"):
			b.WriteByte(p[i])
			i++
		case strings.HasPrefix(p[i:], numPlaceholder):
			b.WriteByte('0')
			i += len(numPlaceholder) - 1
		case p[i] == '{' || p[i] == '}':
			return "", false
		default:
			b.WriteByte(p[i])
		}
	}
	return b.String(), true
}

func TestNormalizePatternMeaningStable(t *testing.T) {
	for _, s := range []string{"abc1", "ab{c}1", "abc{NUM}", "x{{1}}yz", "ΣΟΦΙΑ1", "ａｂｃ１２", "1a1b1c1"} {
		p, ok := NormalizePattern(s)
		if !ok {
			t.Fatalf("NormalizePattern(%q) formed no pattern", s)
		}
		name, wellFormed := renderPattern(p)
		if !wellFormed {
			t.Fatalf("pattern %q has a stray brace", p)
		}
		if again, _ := NormalizePattern(name); again != p {
			t.Errorf("NormalizePattern(%q) = %q, but its spelling %q gives %q", s, p, name, again)
		}
	}
}

func TestKeyByPattern(t *testing.T) {
	kf := mustKey(KeyByPattern(mustKey(KeyByJSONField("nickname", 1024))))
	tests := []struct {
		body string
		want string
		err  error
	}{
		{`{"nickname":"abc17"}`, "abc{NUM}", nil},
		{`{"nickname":"12345"}`, "", ErrNoKey},
		{`{"nickname":"ab"}`, "", ErrNoKey},
		{`{"other":"abc1"}`, "", ErrNoKey},
		{`{"nickname":`, "", ErrInvalidBody},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(tc.body))
		got, err := kf(r)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: key = %q, %v; want %q, %v", tc.body, got, err, tc.want, tc.err)
		}
	}
}

func BenchmarkNormalizePattern(b *testing.B) {
	names := []string{"abc123", "ＡＢＣ１２３", "철수네2024", "a\u200bb c_99x"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ok := NormalizePattern(names[i%len(names)]); !ok {
			b.Fatal("no pattern")
		}
	}
}

// TestNormalizePatternMarksAndUnassigned: what folds away and what is
// refused. Combining and enclosing marks (Mn, Me) are dropped, so a mark
// cannot start a new pattern; private-use, unassigned and noncharacter
// code points form no pattern, so they cannot mint one each.
func TestNormalizePatternMarksAndUnassigned(t *testing.T) {
	tests := []struct {
		what string
		in   string
		want string // "" means ok == false
	}{
		// Folds away.
		{"combining acute on a digit", "abc1\u0301", "abc{NUM}"},
		{"combining keycap (Me)", "abc1\u20e3", "abc{NUM}"},
		{"keycap sequence with variation selector", "abc1\ufe0f\u20e3", "abc{NUM}"},
		{"enclosing circle (Me)", "abc\u20dd1", "abc{NUM}"},
		{"stacked marks", "abc1\u0301\u0302\u0303\u0304", "abc{NUM}"},
		{"mark on a letter", "ab\u0301c1", "abc{NUM}"},
		{"diaeresis", "a\u0308bc1", "abc{NUM}"},
		{"mark inside a digit run", "abc1\u03012", "abc{NUM}"},
		{"variation selector supplement", "abc1\U000E0100", "abc{NUM}"},
		{"decomposed e acute is e", "cafe\u03011", "cafe{NUM}"},
		// Does not fold: a precomposed letter is a letter (canonical
		// equivalence needs golang.org/x/text), a spacing mark (Mc) is kept.
		{"precomposed e acute kept", "caf\u00e91", "caf\u00e9{NUM}"},
		{"spacing mark kept", "abc\u09031", "abc\u0903{NUM}"},
		{"hangul kept", "철수네1", "철수네{NUM}"},
		// Refused: no pattern, the caller falls back (to the client IP).
		{"private use", "abc\ue0001", ""},
		{"private use, last of the BMP area", "abc\uf8ff1", ""},
		{"supplementary private use A", "abc\U000F00001", ""},
		{"supplementary private use B", "abc\U0010FFFD1", ""},
		{"unassigned", "abc\u03781", ""},
		{"unassigned astral", "abc\U0002FFF01", ""},
		{"noncharacter FDD0", "abc\ufdd01", ""},
		{"noncharacter FFFF", "abc\uffff1", ""},
		{"noncharacter 1FFFE", "abc\U0001FFFE1", ""},
		{"private use after marks", "abc1\u0301\ue000", ""},
	}
	for _, tc := range tests {
		got, ok := NormalizePattern(tc.in)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("%s: NormalizePattern(%+q) = %+q, %v; want %+q", tc.what, tc.in, got, ok, tc.want)
		}
	}
}

// TestNormalizePatternPrivateUseMintsNothing: 256 private-use code points
// U+E000-U+E0FF, in any position, do not mint 256 patterns: they mint
// none.
func TestNormalizePatternPrivateUseMintsNothing(t *testing.T) {
	patterns := map[string]bool{}
	for r := rune(0xE000); r <= 0xE0FF; r++ {
		for _, s := range []string{"abc1" + string(r), "abc" + string(r) + "1", string(r) + "abc1", "abc1" + string(r) + string(r)} {
			if p, ok := NormalizePattern(s); ok {
				patterns[p] = true
			}
		}
	}
	if len(patterns) != 0 {
		t.Fatalf("private-use code points formed %d patterns; want none", len(patterns))
	}
	// Marks likewise: 112 combining marks after the digit are one pattern.
	for r := rune(0x0300); r <= 0x036F; r++ {
		if p, ok := NormalizePattern("abc1" + string(r)); ok {
			patterns[p] = true
		}
	}
	if len(patterns) != 1 || !patterns["abc{NUM}"] {
		t.Fatalf("combining marks formed the patterns %v; want only abc{NUM}", patterns)
	}
}
