package redisstore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAdaptersLinkOnlyTheirClient: the core package links neither Redis
// client, and each adapter links only its own, so a program pays only for
// the client it uses.
func TestAdaptersLinkOnlyTheirClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to list dependencies")
	}
	cases := []struct {
		pkg       string
		forbidden []string
	}{
		{".", []string{"github.com/redis/go-redis/", "github.com/redis/rueidis"}},
		{"./goredisstore", []string{"github.com/redis/rueidis"}},
		{"./rueidisstore", []string{"github.com/redis/go-redis/"}},
	}
	for _, tc := range cases {
		out, err := exec.Command("go", "list", "-deps", tc.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range tc.forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s", tc.pkg, dep)
				}
			}
		}
	}
}
