package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery/statedir"
)

// DefaultSpecDir is where container runtimes look for dynamically made
// CDI specs.
const DefaultSpecDir = "/var/run/cdi"

// Writer writes featureplug's spec files into one directory.
type Writer struct {
	// Dir is the CDI spec directory (DefaultSpecDir if empty).
	Dir string
}

func (w Writer) dir() string {
	if w.Dir == "" {
		return DefaultSpecDir
	}
	return w.Dir
}

// Path returns the path of the spec file of kind.
func (w Writer) Path(kind string) string { return filepath.Join(w.dir(), FileName(kind)) }

// Write makes the spec file of spec's kind hold spec, or removes it when
// spec is nil. It writes only when the content differs, through a
// temporary file in the same directory that the CDI library must load
// without error before it is renamed over the old file, so runtimes see
// the old spec or the new one, never a part or an invalid one. It reports
// whether the file changed.
func (w Writer) Write(kind string, spec *specs.Spec) (bool, error) {
	path := w.Path(kind)
	if spec == nil {
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("removing CDI spec: %w", err)
		}
		return true, nil
	}
	if spec.Kind != kind {
		return false, fmt.Errorf("CDI spec %s: kind is %q, want %q", path, spec.Kind, kind)
	}
	return writeSpec(path, spec)
}

// writeSpec writes spec to path unless it holds it already, through a
// temporary file that must load as a spec, and reports whether it wrote.
func writeSpec(path string, spec *specs.Spec) (bool, error) {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	// The temporary file (statedir.WriteFile: a leading dot, no
	// .yaml/.json suffix, so a runtime scanning the directory never loads
	// it) must load as a spec before it replaces the old one.
	verify := func(tmp string) error {
		if _, err := cdiapi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("the CDI spec does not load: %w", err)
		}
		return nil
	}
	if err := statedir.WriteFile(path, data, 0o644, verify); err != nil {
		return false, fmt.Errorf("writing CDI spec: %w", err)
	}
	return true, nil
}

// RemoveStale removes the spec files featureplug wrote in the directory
// (featureplug-*.yaml or .json) other than keep's, and temporary files a
// crash left behind; other files are never touched. It returns the names
// it removed; a directory that does not exist holds nothing stale.
func (w Writer) RemoveStale(keepKinds ...string) ([]string, error) {
	entries, err := os.ReadDir(w.dir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	keep := make([]string, len(keepKinds))
	for i, k := range keepKinds {
		keep[i] = FileName(k)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || slices.Contains(keep, name) || !isOwnFile(name) {
			continue
		}
		if err := os.Remove(filepath.Join(w.dir(), name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// isOwnFile reports whether a file name in the spec directory is one
// featureplug writes: a spec named by FileName or a Writer temporary file.
func isOwnFile(name string) bool {
	if strings.HasPrefix(name, claimFilePrefix) || strings.HasPrefix(name, "."+claimFilePrefix) {
		return false // a prepared DRA claim's (claimspec.go)
	}
	if strings.HasPrefix(name, "."+filePrefix) && strings.HasSuffix(name, ".tmp") {
		return true
	}
	return strings.HasPrefix(name, filePrefix) && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".json"))
}
