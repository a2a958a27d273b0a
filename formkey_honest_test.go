package floodgate

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHonestLoginsKeyed: the defences of issue 18 cost an honest client
// nothing. Ordinary logins — multipart with one user field and a file
// (small, and past MaxFormBytes, where the rest is checked as the
// handler reads it), URL-encoded, a form a CSRF middleware parsed before
// the limit, a query without semicolons (and one whose semicolons read
// the same either way) — are keyed by their user: each user gets its
// own quota of 3, the 4th is 429, and the handler gets the user and the
// whole file.
func TestHonestLoginsKeyed(t *testing.T) {
	bigFile := strings.Repeat("B", 3*MaxFormBytes)
	csrf := func(parse func(*http.Request) error) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := parse(r); err != nil {
					t.Errorf("CSRF middleware's parse: %v", err)
				}
				next.ServeHTTP(w, r)
			})
		}
	}
	parseForm := func(r *http.Request) error { return r.ParseForm() }
	parseMultipart := func(r *http.Request) error { return r.ParseMultipartForm(1 << 20) }
	tests := []struct {
		name  string
		key   KeyFunc
		req   func(user string) *http.Request
		outer func(http.Handler) http.Handler // before the limit; nil: none
		file  string                          // the avatar the handler must get whole
	}{
		{"multipart, a small file", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return multipartPost(t, "POST", "/login", "user", "", u, "avatar", "a.png", "png", "password", "", "pw")
		}, nil, "png"},
		{"multipart, a file past MaxFormBytes", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return multipartPost(t, "POST", "/login", "user", "", u, "avatar", "a.png", bigFile, "password", "", "pw")
		}, nil, bigFile},
		{"urlencoded", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return formPost("/login", "user="+u+"&password=pw")
		}, nil, ""},
		{"urlencoded, parsed by a CSRF middleware", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return formPost("/login", "user="+u+"&password=pw&csrf=t")
		}, csrf(parseForm), ""},
		{"multipart past MaxFormBytes, parsed by a CSRF middleware", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return multipartPost(t, "POST", "/login", "user", "", u, "avatar", "a.png", bigFile, "csrf", "", "t")
		}, csrf(parseMultipart), bigFile},
		{"query, KeyByForm", mustKey(KeyByForm("user")), func(u string) *http.Request {
			return httptest.NewRequest("GET", "/login?user="+u+"&n=1", nil)
		}, nil, ""},
		{"query, KeyByQuery", mustKey(KeyByQuery("user")), func(u string) *http.Request {
			return httptest.NewRequest("GET", "/login?user="+u+"&n=1", nil)
		}, nil, ""},
		{"query with semicolons that read the same, KeyByQuery", mustKey(KeyByQuery("user")), func(u string) *http.Request {
			return httptest.NewRequest("GET", "/login?user="+u+"&a=1;b=2", nil)
		}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := NewMiddleware(mustTokenBucket(t, PerHour(3)), WithKeyFunc(tc.key))
			if err != nil {
				t.Fatal(err)
			}
			var served []string
			var h http.Handler = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				user := r.FormValue("user")
				if tc.file != "" {
					if f := r.MultipartForm.File["avatar"]; len(f) != 1 || f[0].Size != int64(len(tc.file)) || fileSum(t, r) != sha256.Sum256([]byte(tc.file)) {
						t.Errorf("%s: the handler's avatar is not the file sent", user)
					}
					removeForm(r)
				}
				served = append(served, user)
			}))
			if tc.outer != nil {
				h = tc.outer(h)
			}
			var codes []int
			for _, u := range []string{"ann", "ann", "bob", "ann", "ann", "bob"} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, tc.req(u))
				codes = append(codes, rec.Code)
			}
			if want := []int{200, 200, 200, 200, 429, 200}; fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Errorf("statuses %v; want %v (3 per user)", codes, want)
			}
			if want := "[ann ann bob ann bob]"; fmt.Sprint(served) != want {
				t.Errorf("served %v; want %v", served, want)
			}
		})
	}
}

func fileSum(t *testing.T, r *http.Request) [32]byte {
	f, err := r.MultipartForm.File["avatar"][0].Open()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	var b [32 << 10]byte
	for {
		n, err := f.Read(b[:])
		h.Write(b[:n])
		if err != nil {
			break
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
