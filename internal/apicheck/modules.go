package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// module is one Go module of the repository.
type module struct {
	dir  string // from the repository root, "." for the root module
	path string // its module path
}

// findModules returns the modules under root as scripts/modules.sh finds
// them: every directory with a go.mod, except under testdata, vendor or a
// directory whose name starts with "." or "_"; the root first.
func findModules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root {
			n := d.Name()
			if n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		modPath, err := modulePath(path)
		if err != nil {
			return err
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		mods = append(mods, module{dir: filepath.ToSlash(dir), path: modPath})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool {
		if (mods[i].dir == ".") != (mods[j].dir == ".") {
			return mods[i].dir == "."
		}
		return mods[i].dir < mods[j].dir
	})
	if len(mods) == 0 || mods[0].dir != "." {
		return nil, fmt.Errorf("%s has no go.mod: is it the repository root?", root)
	}
	return mods, nil
}

// modulePath reads the module directive of a go.mod (the root module
// depends on nothing that parses one, and the directive is one line).
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no module directive", gomod)
}

// baselineFile is the root module's record of the release the tree is
// checked against.
const baselineFile = "api/baseline.txt"

// baseline is what api/baseline.txt records.
type baseline struct {
	version string   // v0.2.0
	commit  string   // the commit its export data was written from
	modules []string // the directories of the modules the release had
}

// exportFile returns the path, from the repository root, of the export
// data of the module in dir at version.
func exportFile(dir, version string) string {
	return filepath.ToSlash(filepath.Join(dir, "api", version+".zip"))
}

// readBaseline reads api/baseline.txt: comment lines starting with #,
// then "version COMMIT" and "modules DIR...".
func readBaseline(root string) (baseline, error) {
	var b baseline
	data, err := os.ReadFile(filepath.Join(root, baselineFile))
	if err != nil {
		return b, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch {
		case fields[0] == "version" && len(fields) == 3:
			b.version, b.commit = fields[1], fields[2]
		case fields[0] == "modules" && len(fields) > 1:
			b.modules = fields[1:]
		default:
			return b, fmt.Errorf("%s: cannot read %q", baselineFile, line)
		}
	}
	if b.version == "" || len(b.modules) == 0 {
		return b, errors.New(baselineFile + ": no version or no modules line")
	}
	return b, nil
}

// writeBaseline writes api/baseline.txt.
func writeBaseline(root string, b baseline) error {
	text := "# The release every module's API is checked against (scripts/api-check.sh):\n" +
		"# its version, the commit each module's api/" + b.version + ".zip was written\n" +
		"# from (scripts/api-baseline.sh), and the modules it had.\n" +
		"version " + b.version + " " + b.commit + "\n" +
		"modules " + strings.Join(b.modules, " ") + "\n"
	if err := os.MkdirAll(filepath.Join(root, "api"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, baselineFile), []byte(text), 0o644)
}
