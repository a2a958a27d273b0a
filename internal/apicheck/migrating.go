package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// migratingFile lists, per release, every change that breaks code
// written against the one before.
const migratingFile = "MIGRATING.md"

// section returns the heading MIGRATING.md gives the changes since
// version: "## v0.2 →" for v0.2.0 (followed by the coming version).
func section(version string) string {
	minor := version
	if parts := strings.SplitN(version, ".", 3); len(parts) == 3 {
		minor = parts[0] + "." + parts[1]
	}
	return "## " + minor + " →"
}

// namesHeading is the heading, within a release's section, of the table
// of the incompatible changes apidiff finds.
const namesHeading = "### The incompatible changes apidiff finds"

// migratingNames returns the names listed in the first column of the
// table under namesHeading in MIGRATING.md's section for the changes
// since version, each with its line number; a row names a change when
// its first cell is one code span.
func migratingNames(root, version string) (map[string]int, error) {
	data, err := os.ReadFile(filepath.Join(root, migratingFile))
	if err != nil {
		return nil, err
	}
	return tableNames(string(data), section(version)), nil
}

// tableNames returns the names of the rows of the table under
// namesHeading within the section whose heading starts with heading.
func tableNames(text, heading string) map[string]int {
	names := map[string]int{}
	inSection, in, fenced := false, false, false
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "## ") {
			inSection = strings.HasPrefix(line, heading)
			in = false
			continue
		}
		if strings.HasPrefix(line, "### ") {
			in = inSection && strings.TrimSpace(line) == namesHeading
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		first := strings.TrimSpace(cells[1])
		if len(first) > 2 && first[0] == '`' && first[len(first)-1] == '`' && !strings.Contains(first[1:len(first)-1], "`") {
			names[first[1:len(first)-1]] = i + 1
		}
	}
	return names
}

// verdict prints every change and whether MIGRATING.md names it, and
// fails when one is unnamed or when MIGRATING.md lists a name apidiff no
// longer reports.
func verdict(out io.Writer, version string, changes []change, named map[string]int) error {
	reported := map[string]bool{}
	var unnamed []string
	for _, c := range changes {
		reported[c.name] = true
		state := "named"
		if _, ok := named[c.name]; !ok {
			state = "NOT NAMED"
			unnamed = append(unnamed, c.name)
		}
		fmt.Fprintf(out, "  %-9s %s (%s: %s)\n", state, c.name, c.module, c.message)
	}
	var stale []string
	for name, line := range named {
		if !reported[name] {
			stale = append(stale, fmt.Sprintf("%s (%s:%d)", name, migratingFile, line))
		}
	}
	sort.Strings(stale)
	var errs []error
	if len(unnamed) > 0 {
		errs = append(errs, fmt.Errorf("%d incompatible change(s) since %s that %s does not name: add a row for each (| `%s` | what changed | what to write instead |) under %q in its section %q",
			len(unnamed), version, migratingFile, unnamed[0], namesHeading, section(version)+" …"))
	}
	if len(stale) > 0 {
		errs = append(errs, fmt.Errorf("%s names what apidiff no longer reports as incompatible since %s: %s", migratingFile, version, strings.Join(stale, ", ")))
	}
	if len(errs) == 0 {
		fmt.Fprintf(out, "every incompatible change since %s is named in %s\n", version, migratingFile)
	}
	return errors.Join(errs...)
}
