//go:build nonvcdi

package agent

import (
	"errors"
	"log/slog"

	"github.com/featureplug/featureplug/plugin/cdi"
)

// newNVCDIGenerator fails: this binary was built with -tags nonvcdi, so
// it writes CDI specs only for fake nodes.
func newNVCDIGenerator(*RealSource, CDIConfig, *slog.Logger) (cdi.Generator, error) {
	return nil, errors.New("CDI specs on real GPUs need nvcdi, which this binary was built without (-tags nonvcdi); use a device-list strategy other than cdi-* or a build without that tag")
}
