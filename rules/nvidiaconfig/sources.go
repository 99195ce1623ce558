package nvidiaconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxFileSize is the largest file ReadFiles reads.
const MaxFileSize = 1 << 20

// joinErrors joins a parse's errors.
func joinErrors(errs []error) error { return errors.Join(errs...) }

// Kind says what a file holds.
type Kind int

// Kinds of files Detect tells apart.
const (
	// Other is anything else, such as a featureplug rules file.
	Other Kind = iota
	// Single is one NVIDIA device-plugin config (top-level version: v1).
	Single
	// ConfigMap is a Kubernetes ConfigMap manifest whose data keys are
	// named configs.
	ConfigMap
)

// head is what Detect reads of a file.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Version    any    `json:"version"`
}

// Detect says whether data is an NVIDIA device-plugin config (recognised by
// a top-level "version: v1" and no apiVersion), a ConfigMap manifest, or
// something else.
func Detect(data []byte) Kind {
	var h head
	if err := yaml.Unmarshal(data, &h); err != nil {
		return Other
	}
	switch {
	case h.APIVersion == "v1" && h.Kind == "ConfigMap":
		return ConfigMap
	case h.APIVersion == "" && h.Version == Version:
		return Single
	}
	return Other
}

// configMap is the part of a ConfigMap manifest that holds configs.
type configMap struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}

// ParseFile parses a file's content: a ConfigMap manifest gives one config
// per data key, named after the key, in key order; any other file is one
// config, named name ("" for a lone unnamed config). Errors name the file,
// config, field and value.
func ParseFile(file, name string, data []byte) ([]*Config, error) {
	if Detect(data) != ConfigMap {
		c, err := ParseConfig(file, name, "", data)
		if err != nil {
			return nil, err
		}
		return []*Config{c}, nil
	}
	var cm configMap
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, &Error{File: file, Msg: "invalid ConfigMap: " + err.Error()}
	}
	if len(cm.Data) == 0 {
		return nil, &Error{File: file, Field: "data", Msg: "the ConfigMap holds no configs"}
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []*Config
	var errs []error
	for _, k := range keys {
		origin := "ConfigMap " + cm.Metadata.Name + " data key " + strconv.Quote(k)
		c, err := ParseConfig(file, k, origin, []byte(cm.Data[k]))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ReadFiles reads configs from files: ConfigMap manifests and config
// files. With one config file, it is a lone config; with several inputs,
// each config file is named after the file, without its extension, as
// NVIDIA's config manager names the files of a mounted ConfigMap.
func ReadFiles(paths []string) ([]*Config, error) {
	var out []*Config
	var errs []error
	for _, path := range paths {
		data, err := readFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name := ""
		if len(paths) > 1 {
			name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		}
		cfgs, err := ParseFile(path, name, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, cfgs...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// readFile reads a file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading NVIDIA config: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading NVIDIA config: %w", err)
	}
	return data, nil
}

// ConvertData converts one file's content, a config or a ConfigMap
// manifest, as `featureplug run --rules` reads it: the default config is
// the only one, else none.
func ConvertData(file string, data []byte) (*Result, error) {
	cfgs, err := ParseFile(file, "", data)
	if err != nil {
		return nil, err
	}
	return Convert(cfgs, Options{})
}
