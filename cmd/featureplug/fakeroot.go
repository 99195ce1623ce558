package main

import (
	"fmt"
	"os"

	"github.com/featureplug/featureplug/discovery/fakenode/mpscontrol"
	"github.com/featureplug/featureplug/plugin/mps"
)

// fakeDriverRoot is the driver root of a fake node, with a working MPS
// control program: nvidia-cuda-mps-control links to this binary, which
// runs as the fake control daemon under that name (package mpscontrol).
// The MPS supervisor starts its control daemons from it, so a fake node
// serves MPS-shared resources through the agent's own code; the CDI sink
// lays out the rest of the root (device nodes, libraries:
// fakenode.WriteDriverRoot) when it writes specs, as before.
type fakeDriverRoot struct {
	// dir is the root.
	dir string
	// mpsControl is the control program in it.
	mpsControl string
	// remove removes a root made in a temporary directory.
	remove func()
}

// newFakeDriverRoot makes the driver root of a fake node in dir, or in a
// new temporary directory when dir is "" or "/" (which remove removes).
func newFakeDriverRoot(dir string) (*fakeDriverRoot, error) {
	root := &fakeDriverRoot{dir: dir, remove: func() {}}
	if dir == "" || dir == "/" {
		tmp, err := os.MkdirTemp("", "featureplug-fake-driver-root-")
		if err != nil {
			return nil, fmt.Errorf("fake driver root: %w", err)
		}
		root.dir, root.remove = tmp, func() { _ = os.RemoveAll(tmp) }
	}
	exe, err := os.Executable()
	if err == nil {
		root.mpsControl, err = mpscontrol.Install(root.dir, exe)
	}
	if err != nil {
		root.remove()
		return nil, fmt.Errorf("fake driver root: the MPS control program links to this binary: %w", err)
	}
	return root, nil
}

// mpsControlProblem says why the MPS control program the agent would use
// is missing, or returns nil: --mps-control when given, else the fake
// node's own (always there) or nvidia-cuda-mps-control in PATH.
func mpsControlProblem(src sourceFlags, mpsControl string, given bool) error {
	if src.fakeNode != "" && !given {
		return nil
	}
	_, err := mps.ResolveControlBinary(mpsControl)
	return err
}
