package floodgate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// page posts JSON (so the browser sends a preflight first) to api five
// times, each to a fresh URL so that no preflight is cached, and writes
// what the script could read of each answer: the status and Retry-After,
// or the network error a browser reports for an answer without CORS
// headers.
const page = `<!doctype html><html><body><pre id="out">pending</pre><script>
(async () => {
  const seen = [];
  for (let i = 0; i < 5; i++) {
    try {
      const r = await fetch(API + "/api/order?i=" + i, {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"});
      seen.push(r.status + ":" + (r.headers.get("Retry-After") || "-"));
    } catch (e) {
      seen.push("network-error");
    }
  }
  document.getElementById("out").textContent = "done " + seen.join(" ");
})();
</script></body></html>`

// TestPreflightInRealBrowser runs the CORS placements of the README with a
// real browser (headless Chromium, if installed): it sends its own
// preflights. With the CORS handler outside the limit, 3 of 5 POSTs pass
// on a quota of 3 and the page reads the 429 and its Retry-After; with
// the limit outside, the preflights are not counted either (3 pass), but
// the page sees the denials only as network errors.
func TestPreflightInRealBrowser(t *testing.T) {
	chromium, err := findBrowser()
	if err != nil {
		if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
			t.Fatal("chromium is not installed (apt-get install chromium), and FLOODGATE_REQUIRE_SERVERS=1 requires this test to run")
		}
		t.Skip("chromium is not installed (apt-get install chromium); the same placements are checked without a browser by TestPreflightNeverConsumesQuota and TestPreflightAnswers")
	}
	for _, tt := range []struct {
		placement string
		want      string
	}{
		{"CORS outside the limit", "done 200:- 200:- 200:- 429:1200 429:1200"},
		{"limit outside CORS", "done 200:- 200:- 200:- network-error network-error"},
	} {
		t.Run(tt.placement, func(t *testing.T) {
			var preflights, posts atomic.Int32
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				_, _ = w.Write([]byte(`{"ok":true}`))
			})
			limit := mustMiddleware(t, mustTokenBucket(t, PerHour(3), WithClock(routeClock())), WithKeyFunc(func(*http.Request) (string, error) { return "page", nil }))
			pageURL := "http://127.0.0.1:" + port(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				_, _ = w.Write([]byte(strings.Replace(page, "API", `"`+apiURL(r)+`"`, 1)))
			}))
			origin := pageURL
			var api http.Handler
			if tt.placement == "CORS outside the limit" {
				api = cors(origin, limit(handler))
			} else {
				api = limit(cors(origin, handler))
			}
			apiPort := port(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodOptions {
					preflights.Add(1)
				}
				api.ServeHTTP(w, r)
			}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
				"--virtual-time-budget=20000", "--dump-dom", pageURL+"/?api="+apiPort).Output()
			if err != nil {
				t.Fatalf("chromium: %v", err)
			}
			got := regexp.MustCompile(`<pre id="out">([^<]*)</pre>`).FindSubmatch(out)
			if got == nil || string(got[1]) != tt.want {
				t.Errorf("the page read %q, want %q", got, tt.want)
			}
			if preflights.Load() != 5 || posts.Load() != 3 {
				t.Errorf("the browser sent %d preflights and the handler ran %d times; want 5 and 3", preflights.Load(), posts.Load())
			}
		})
	}
}

// apiURL is the API's origin for the page: localhost, another origin than
// the page's 127.0.0.1, on the port the page was asked for.
func apiURL(r *http.Request) string {
	return "http://localhost:" + r.URL.Query().Get("api")
}

// port serves h on a free loopback port until the test ends.
func port(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// findBrowser returns the path of a Chromium-based browser: Debian's
// chromium, or the Chrome that GitHub's Ubuntu runners carry.
func findBrowser() (string, error) {
	var err error
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		var path string
		if path, err = exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", err
}
