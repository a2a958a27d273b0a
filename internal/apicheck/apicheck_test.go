package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDocName(t *testing.T) {
	const mod = "github.com/floodgate-go/floodgate"
	for _, tc := range []struct{ mod, obj, want string }{
		{mod, "KeyByHeader", "floodgate.KeyByHeader"},
		{mod, "(*TokenBucket).AllowN", "floodgate.TokenBucket.AllowN"},
		{mod, "Decision.Limit", "floodgate.Decision.Limit"},
		{mod, "./turnstile.New", "turnstile.New"},
		{mod, "./floodgatetest.(*Clock).After", "floodgatetest.Clock.After"},
		{mod + "/redisstore", "./goredisstore.Options.Timeout", "goredisstore.Options.Timeout"},
		{mod, "(*SelectorFor[T]).Select", "floodgate.SelectorFor.Select"},
		{mod, "./x.(*S[github.com/a/b.C]).M", "x.S.M"},
		{mod, "Limiter, method set of *Limiter", "floodgate.Limiter"},
		{mod + "/contrib/grpclimit", "KeyByFullMethod", "grpclimit.KeyByFullMethod"},
		{"example.com/m/v2", "F", "m.F"},
		{mod, "package github.com/floodgate-go/floodgate/old", "github.com/floodgate-go/floodgate/old"},
	} {
		if got := docName(tc.mod, tc.obj); got != tc.want {
			t.Errorf("docName(%q, %q) = %q, want %q", tc.mod, tc.obj, got, tc.want)
		}
	}
}

func TestParseReport(t *testing.T) {
	report := "- KeyByQuery: changed from func(string) KeyFunc to func(string) (KeyFunc, error)\n" +
		"- ./floodgatetest.Clock: old is comparable, new is not\n"
	got := parseReport("github.com/floodgate-go/floodgate", []byte(report))
	want := []change{
		{"github.com/floodgate-go/floodgate", "floodgate.KeyByQuery", "KeyByQuery: changed from func(string) KeyFunc to func(string) (KeyFunc, error)"},
		{"github.com/floodgate-go/floodgate", "floodgatetest.Clock", "./floodgatetest.Clock: old is comparable, new is not"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseReport = %+v, want %+v", got, want)
	}
}

// migrating is a MIGRATING.md with two releases' sections; only v0.2's
// table under namesHeading names changes since v0.2.0.
const migrating = "# Migrating\n\n" +
	"## v0.2 → v0.3\n\n" +
	"| before | after |\n|---|---|\n| `KeyByHeader(name)` | `KeyByHeader(name)` and an error |\n\n" +
	"```\n| `in.Code` | x |\n```\n\n" +
	"### The incompatible changes apidiff finds\n\n" +
	"| name | change | what to write instead |\n|---|---|---|\n" +
	"| `floodgate.KeyByHeader` | returns an error | check it |\n" +
	"| `turnstile.New` | one more result | check it |\n\n" +
	"### Other\n\n| `floodgate.Later` | x | y |\n\n" +
	"## v0.1 → v0.2\n\n" +
	"### The incompatible changes apidiff finds\n\n| `floodgate.Old` | x | y |\n"

func TestTableNames(t *testing.T) {
	got := tableNames(migrating, section("v0.2.0"))
	want := map[string]int{"floodgate.KeyByHeader": 17, "turnstile.New": 18}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tableNames = %v, want %v", got, want)
	}
	if got := tableNames(migrating, section("v0.3.0")); len(got) != 0 {
		t.Errorf("names of a section that does not exist: %v", got)
	}
}

func TestVerdict(t *testing.T) {
	named := tableNames(migrating, section("v0.2.0"))
	header := change{"m", "floodgate.KeyByHeader", "KeyByHeader: changed"}
	turnstile := change{"m", "turnstile.New", "./turnstile.New: changed"}
	query := change{"m", "floodgate.KeyByQuery", "KeyByQuery: changed"}
	for _, tc := range []struct {
		name    string
		changes []change
		wantErr []string // each in the error; none: no error
	}{
		{"every change named", []change{header, turnstile}, nil},
		{"an unnamed change", []change{header, turnstile, query}, []string{"1 incompatible change(s)", "floodgate.KeyByQuery"}},
		{"a name no longer reported", []change{header}, []string{"no longer reports", "turnstile.New (MIGRATING.md:18)"}},
	} {
		var out bytes.Buffer
		err := verdict(&out, "v0.2.0", tc.changes, named)
		if len(tc.wantErr) == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error; printed:\n%s", tc.name, out.String())
			continue
		}
		for _, w := range tc.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
}

func TestReadBaseline(t *testing.T) {
	root := t.TempDir()
	want := baseline{version: "v0.2.0", commit: "0430301", modules: []string{".", "redisstore"}}
	if err := writeBaseline(root, want); err != nil {
		t.Fatal(err)
	}
	got, err := readBaseline(root)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("readBaseline = %+v, %v; want %+v", got, err, want)
	}
}

// TestCheckFailsOnUnnamedChange runs the whole check, apidiff included, on
// a small module with a release and a tree that breaks it: the baseline
// is written from the release's commit (write), then the check fails
// while MIGRATING.md leaves one change unnamed and passes once it names
// both. It needs the apidiff binary: scripts/api-check.sh sets APIDIFF.
func TestCheckFailsOnUnnamedChange(t *testing.T) {
	apidiff := os.Getenv("APIDIFF")
	if apidiff == "" {
		t.Skip("APIDIFF (the apidiff binary) is not set; scripts/api-check.sh runs this test with it")
	}
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	root := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	put := func(file, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("go.mod", "module example.com/m\n\ngo 1.21\n")
	put("m.go", "package m\n\n// F returns one.\nfunc F() int { return 1 }\n")
	put("sub/sub.go", "package sub\n\n// T is a type.\ntype T struct{}\n\n// M does nothing.\nfunc (*T) M() {}\n")
	run("git", "init", "-q")
	run("git", "add", ".")
	run("git", "commit", "-q", "-m", "v1.0.0")
	var out bytes.Buffer
	if err := write(&out, root, apidiff, "v1.0.0", "HEAD"); err != nil {
		t.Fatalf("write: %v\n%s", err, out.String())
	}
	// The tree breaks both: F returns an error, T loses M.
	put("m.go", "package m\n\n// F returns one.\nfunc F() (int, error) { return 1, nil }\n")
	put("sub/sub.go", "package sub\n\n// T is a type.\ntype T struct{}\n")
	table := "## v1.0 → v1.1\n\n" + namesHeading + "\n\n| name | change | instead |\n|---|---|---|\n" +
		"| `m.F` | returns an error | check it |\n"

	put(migratingFile, table)
	out.Reset()
	err := runCheck(&out, root, apidiff)
	if err == nil || !strings.Contains(err.Error(), "1 incompatible change(s)") || !strings.Contains(out.String(), "NOT NAMED sub.T.M") {
		t.Fatalf("check with sub.T.M unnamed: error %v; printed:\n%s", err, out.String())
	}

	put(migratingFile, table+"| `sub.T.M` | removed | nothing |\n")
	out.Reset()
	if err := runCheck(&out, root, apidiff); err != nil {
		t.Fatalf("check with both named: %v; printed:\n%s", err, out.String())
	}
}
