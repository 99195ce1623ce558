//go:build nonvcdi

package cdi

import "errors"

// NewNVCDIGenerator fails: this binary was built with -tags nonvcdi, so it
// writes CDI specs only for fake nodes.
func NewNVCDIGenerator(NVCDIOptions) (Generator, error) {
	return nil, errors.New("CDI specs on real GPUs need nvcdi, which this binary was built without (-tags nonvcdi); use a device-list strategy other than cdi-* or a build without that tag")
}
