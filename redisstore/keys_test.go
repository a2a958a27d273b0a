package redisstore

import (
	"strings"
	"testing"
)

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, if that is not empty.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestClientTag(t *testing.T) {
	cases := []struct {
		key, want string
	}{
		{"1.2.3.4", "fg:{1.2.3.4}:"},
		{"", "fg:{%}:"},
		{"%", "fg:{%25}:"},
		{"a}b", "fg:{a%7Db}:"},
		{"{x}", "fg:{%7Bx%7D}:"},
		{"abc{NUM}", "fg:{abc%7BNUM%7D}:"},
		{"ключ\x00", "fg:{ключ\x00}:"},
	}
	for _, tc := range cases {
		if got := clientKey("fg", tc.key, ""); got != tc.want {
			t.Errorf("clientKey(%q, \"\") = %q, want %q", tc.key, got, tc.want)
		}
		if got := clientKey("fg", tc.key, "tb"); got != tc.want+"tb" {
			t.Errorf("clientKey(%q, \"tb\") = %q, want %q", tc.key, got, tc.want+"tb")
		}
	}
}

// TestClientTagHashesClientOnly checks the Cluster property: the hash tag
// of every key is exactly the escaped client key, so one client's keys
// share a slot, and distinct clients never share a tag.
func TestClientTagHashesClientOnly(t *testing.T) {
	keys := []string{"", "%", "%25", "%7D", "}", "{", "{}", "}{", "a{b}c", "a", "A", "a ", "a\x00"}
	seen := map[string]string{}
	for _, k := range keys {
		tag := clientKey("p", k, "")
		for _, suffix := range []string{"tb", "log", "sc"} {
			if h := hashTag(tag + suffix); h != hashTag(tag+"tb") {
				t.Errorf("key %q: %q hashes %q, %q hashes %q", k, tag+suffix, h, tag+"tb", hashTag(tag+"tb"))
			}
		}
		h := hashTag(tag + "tb")
		if h == tag+"tb" {
			t.Errorf("key %q: %q has no hash tag", k, tag+"tb")
		}
		if other, dup := seen[h]; dup {
			t.Errorf("keys %q and %q share the hash tag %q", k, other, h)
		}
		seen[h] = k
	}
}

func TestCheckPrefix(t *testing.T) {
	for _, p := range []string{"", "floodgate", "fg:signup", "a:b:c"} {
		if err := checkPrefix(p); err != nil {
			t.Errorf("checkPrefix(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"{fg}", "fg{", "fg}"} {
		if err := checkPrefix(p); err == nil {
			t.Errorf("checkPrefix(%q) = nil, want an error", p)
		}
	}
}
