package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// change is one incompatible change apidiff reports.
type change struct {
	module  string // the module path
	name    string // the name go doc gives it: floodgate.KeyByHeader
	message string // apidiff's line, as it printed it
}

// diffModules compares every module the baseline has with the tree and
// returns the incompatible changes, printing per module what it did.
func diffModules(out io.Writer, root, apidiff string, b baseline, mods []module) ([]change, error) {
	inTree := map[string]module{}
	for _, m := range mods {
		inTree[m.dir] = m
	}
	rootPath := mods[0].path
	var changes []change
	had := map[string]bool{}
	for _, dir := range b.modules {
		had[dir] = true
		m, ok := inTree[dir]
		if !ok {
			p := path.Join(rootPath, dir)
			fmt.Fprintf(out, "%s: removed since %s\n", p, b.version)
			changes = append(changes, change{module: p, name: p, message: "module removed"})
			continue
		}
		export, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(exportFile(dir, b.version))))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(export); err != nil {
			return nil, fmt.Errorf("%s: no export data of %s for %s (scripts/api-baseline.sh writes it): %w", m.path, b.version, dir, err)
		}
		report, err := runAPIDiff(root, apidiff, m, nil, "-m", "-incompatible", export, m.path)
		if err != nil {
			return nil, err
		}
		found := parseReport(m.path, report)
		fmt.Fprintf(out, "%s: %d incompatible change(s) since %s\n", m.path, len(found), b.version)
		changes = append(changes, found...)
	}
	for _, m := range mods {
		if !had[m.dir] {
			fmt.Fprintf(out, "%s: new since %s, nothing to compare\n", m.path, b.version)
		}
	}
	return changes, nil
}

// runAPIDiff runs apidiff with args in module m's directory and returns
// its standard output. The root module is loaded outside the workspace:
// in it, the pattern "root/..." would take in every nested module's
// packages too. env is added to the environment.
func runAPIDiff(root, apidiff string, m module, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command(apidiff, args...)
	cmd.Dir = filepath.Join(root, filepath.FromSlash(m.dir))
	cmd.Env = append(os.Environ(), env...)
	if m.dir == "." {
		cmd.Env = append(cmd.Env, "GOWORK=off")
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s (in %s): %w\n%s", apidiff, strings.Join(args, " "), m.dir, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// parseReport turns apidiff -m -incompatible's lines ("- NAME: what")
// into changes of module modPath.
func parseReport(modPath string, report []byte) []change {
	var changes []change
	for _, line := range strings.Split(string(report), "\n") {
		msg, ok := strings.CutPrefix(line, "- ")
		if !ok {
			continue
		}
		obj, _, _ := strings.Cut(msg, ": ")
		changes = append(changes, change{module: modPath, name: docName(modPath, obj), message: msg})
	}
	return changes
}

// typeArgs matches a bracketed list of type arguments or parameters,
// innermost first.
var typeArgs = regexp.MustCompile(`\[[^\[\]]*\]`)

// docName turns apidiff's name of an object of module modPath into the
// one go doc takes: the package's name, then the object's, a method
// after its type. apidiff writes an object of the module's root package
// bare (KeyByHeader), one of another package of the module after its
// relative path (./turnstile.New), a method after its receiver
// ((*TokenBucket).AllowN), a part after a comma (T, method set of *T)
// and a removed package as "package PATH".
func docName(modPath, obj string) string {
	if p, ok := strings.CutPrefix(obj, "package "); ok {
		return p
	}
	obj, _, _ = strings.Cut(obj, ", ")
	for typeArgs.MatchString(obj) {
		obj = typeArgs.ReplaceAllString(obj, "")
	}
	pkg := modPath
	if slash := strings.LastIndex(obj, "/"); slash >= 0 {
		dot := strings.Index(obj[slash:], ".")
		if dot < 0 {
			return obj
		}
		pkg, obj = obj[:slash+dot], obj[slash+dot+1:]
	}
	obj = strings.NewReplacer("(*", "", "(", "", ")", "").Replace(obj)
	return packageName(pkg) + "." + obj
}

// packageName returns the name of the package at path as this repository
// names its packages: the last element, skipping a major version suffix.
func packageName(p string) string {
	elems := strings.Split(strings.TrimPrefix(p, "./"), "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		last = elems[len(elems)-2]
	}
	return last
}
