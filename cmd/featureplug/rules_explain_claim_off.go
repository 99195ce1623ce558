//go:build noclaimexplain

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// explain fails: the agent's image is built without CEL and the DRA
// allocator (-tags noclaimexplain), which only rules explain --claim needs.
func (f *claimFlags) explain(*cobra.Command, sourceFlags, *explainNodeFlags, string, map[string]string, string) error {
	return errors.New("--claim: this binary was built without the DRA allocator (-tags noclaimexplain, as the container image is, " +
		"to keep CEL out of the agent); run rules explain --claim with a featureplug built without that tag (make build)")
}
