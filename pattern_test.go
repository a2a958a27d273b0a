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
		if !utf8.ValidRune(r) || ignorable(r) {
			continue
		}
		f := foldRune(r)
		if unicode.IsNumber(r) != unicode.IsNumber(f) {
			t.Fatalf("foldRune(%U) = %U changes number-ness", r, f)
		}
		if ignorable(f) || foldRune(f) != f || !utf8.ValidRune(f) {
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
	kf := KeyByPattern(KeyByJSONField("nickname", 1024))
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
