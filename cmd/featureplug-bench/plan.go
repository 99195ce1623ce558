package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// expectedPlan asks the agent binary what it will serve on the fake node
// with the rules (`featureplug rules explain -o json`), so the bench knows
// which resources to wait for without a copy of the rules logic.
func expectedPlan(ctx context.Context, binary, fakeNode, rulesName string) ([]plan.Resource, error) {
	cmd := exec.CommandContext(ctx, binary, "rules", "explain", "--fake-node", fakeNode, "--rules", rulesName, "-o", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return parsePlan(stdout.Bytes(), strings.Join(cmd.Args, " "))
}

// parsePlan reads the resources of a `rules explain -o json` document;
// source names it in errors.
func parsePlan(data []byte, source string) ([]plan.Resource, error) {
	var doc struct {
		Resources []plan.Resource `json:"resources"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: decoding the plan: %w", source, err)
	}
	if len(doc.Resources) == 0 {
		return nil, fmt.Errorf("%s: field resources: the rules make no resource on this node; nothing to measure", source)
	}
	for i, r := range doc.Resources {
		if r.Name == "" || len(r.Devices) == 0 {
			return nil, fmt.Errorf("%s: field resources[%d]: resource %q with %d devices", source, i, r.Name, len(r.Devices))
		}
	}
	return doc.Resources, nil
}

// advertised is the number of devices the kubelet sees for r: each device
// once per sharing replica.
func advertised(r plan.Resource) int {
	return len(r.Devices) * max(1, r.Sharing.Replicas)
}

// allocationTarget is the resource the allocation calls go to: the one
// with the most advertised devices (the first by name on a tie), so that
// GetPreferredAllocation chooses among as many devices as the node has.
func allocationTarget(resources []plan.Resource) plan.Resource {
	best := resources[0]
	for _, r := range resources[1:] {
		if advertised(r) > advertised(best) {
			best = r
		}
	}
	return best
}

// healthTarget is the resource and the GPU indices whose health events the
// bench plays: the first resource with whole GPUs (the first resource when
// there is none), and up to n of its distinct GPUs.
func healthTarget(resources []plan.Resource, n int) (plan.Resource, []int) {
	target := resources[0]
	for _, r := range resources {
		if r.Devices[0].Kind == plan.DeviceGPU {
			target = r
			break
		}
	}
	var gpus []int
	for _, d := range target.Devices {
		if len(gpus) == n {
			break
		}
		if len(gpus) == 0 || gpus[len(gpus)-1] != d.GPUIndex {
			gpus = append(gpus, d.GPUIndex)
		}
	}
	return target, gpus
}
