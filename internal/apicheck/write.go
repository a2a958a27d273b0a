package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// write makes the release at commit the tree's baseline: each module's
// export data at api/VERSION.zip in its directory of the tree, written
// from the commit's own files and workspace, and api/baseline.txt.
// The previous baseline's files are removed.
func write(out io.Writer, root, apidiff, version, commit string) error {
	if !strings.HasPrefix(version, "v") || strings.Count(version, ".") != 2 {
		return fmt.Errorf("version %q: want vX.Y.Z", version)
	}
	full, err := exec.Command("git", "-C", root, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return fmt.Errorf("git rev-parse %s: %w (the baseline is written from a full clone)", commit, err)
	}
	commit = strings.TrimSpace(string(full))
	tmp, err := os.MkdirTemp("", "apicheck")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := extract(root, commit, tmp); err != nil {
		return err
	}
	released, err := findModules(tmp)
	if err != nil {
		return err
	}
	current, err := findModules(root)
	if err != nil {
		return err
	}
	if old, err := readBaseline(root); err == nil {
		for _, m := range current {
			if err := os.Remove(filepath.Join(root, filepath.FromSlash(exportFile(m.dir, old.version)))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	// Export data records the file of each declaration: -trimpath makes
	// those the module's own paths (github.com/floodgate-go/floodgate/
	// limiter.go), so that the files are the same whoever writes them,
	// wherever.
	trimpath := []string{"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath")}
	inTree := map[string]bool{}
	for _, m := range current {
		inTree[m.dir] = true
	}
	b := baseline{version: version, commit: commit}
	for _, m := range released {
		b.modules = append(b.modules, m.dir)
		if !inTree[m.dir] {
			fmt.Fprintf(out, "%s: not in the tree any more, no export data written\n", m.path)
			continue
		}
		dest, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(exportFile(m.dir, version))))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if _, err := runAPIDiff(tmp, apidiff, m, trimpath, "-m", "-w", dest, m.path); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s\n", m.path, exportFile(m.dir, version))
	}
	return writeBaseline(root, b)
}

// extract writes the files of commit into dir.
func extract(root, commit, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	cmd.Stderr = os.Stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := untar(r, dir); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	return cmd.Wait()
}

// untar writes the files of the tar stream r into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("git archive: entry %q outside the tree", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFile(name, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func writeFile(name string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
