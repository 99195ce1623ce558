package fakenode

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// OnWaitBlocks makes set call f each time a Wait finds no event and
// blocks, so that tests inject events into a Wait in progress without
// sleeping. Call it before the Wait starts.
func OnWaitBlocks(set nvml.EventSet, f func()) { set.(*eventSet).onBlock = f }
