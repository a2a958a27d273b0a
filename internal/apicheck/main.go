// Command apicheck holds every module of this repository to the API of
// its last release: an incompatible change fails the check unless
// MIGRATING.md names it.
//
// The API of the last release is committed as export data, one file per
// module (api/vX.Y.Z.zip in the module's directory, written by apidiff
// from the release commit), so that the check needs neither the release's
// tag nor its commit: it runs on a shallow clone with no network but the
// Go module proxy. api/baseline.txt (in the root module) names the
// release, the commit its export data was written from, and the modules
// it had.
//
//	apicheck -apidiff BIN check            # scripts/api-check.sh
//	apicheck -apidiff BIN write VERSION COMMIT  # scripts/api-baseline.sh
//
// check runs "apidiff -m -incompatible" for every module that has a
// baseline, turns each change it reports into the name go doc gives it
// (floodgate.KeyByHeader, turnstile.Verifier.Verify, goredisstore.Options.Timeout),
// and requires that name in the first column of a table of MIGRATING.md's
// section for the baseline's minor version ("## v0.2 → v0.3"). A name the
// table lists that apidiff no longer reports fails too: the table says
// what breaks, not what once did. A module that the release had and the
// tree has not must be named by its module path.
//
// write extracts COMMIT into a temporary directory with git archive and
// writes each of its modules' export data into this tree, replacing the
// previous baseline.
//
// Only apidiff's signature-level findings are checked; a change of
// behaviour (what a function accepts, what it refuses) is for
// MIGRATING.md's prose, written by a person.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	apidiff := flag.String("apidiff", "apidiff", "the apidiff binary (golang.org/x/exp/cmd/apidiff)")
	root := flag.String("root", ".", "the repository root")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: apicheck [-apidiff BIN] [-root DIR] check | write VERSION COMMIT\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	switch args := flag.Args(); {
	case len(args) == 1 && args[0] == "check":
		err = runCheck(os.Stdout, *root, *apidiff)
	case len(args) == 3 && args[0] == "write":
		err = write(os.Stdout, *root, *apidiff, args[1], args[2])
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

// runCheck checks the tree at root against its baseline and prints what
// it found to out.
func runCheck(out io.Writer, root, apidiff string) error {
	b, err := readBaseline(root)
	if err != nil {
		return err
	}
	mods, err := findModules(root)
	if err != nil {
		return err
	}
	changes, err := diffModules(out, root, apidiff, b, mods)
	if err != nil {
		return err
	}
	named, err := migratingNames(root, b.version)
	if err != nil {
		return err
	}
	return verdict(out, b.version, changes, named)
}
