package rules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/featureplug/featureplug/rules/plan"
)

// writeVFIODecision adds, for a VFIO device a rule claimed, what serving
// it takes: its IOMMU group and device nodes, the group's other devices,
// its NUMA node and driver.
func writeVFIODecision(b *strings.Builder, p *plan.Plan, d *plan.Decision) {
	if d.Kind != plan.DeviceVFIO {
		return
	}
	r, ok := p.VFIOResource(d.Resource)
	if !ok {
		return
	}
	for _, dev := range r.Devices {
		if dev.ID != d.Device || dev.VFIO == nil {
			continue
		}
		v := dev.VFIO
		group := "IOMMU group " + strconv.Itoa(v.IOMMUGroup)
		if v.GroupDevices > 1 {
			group += fmt.Sprintf(" (%d devices, passed through together)", v.GroupDevices)
		}
		numa := "NUMA " + strconv.Itoa(dev.NUMANode)
		if dev.NUMANode < 0 {
			numa = "no NUMA node"
		}
		driver := v.Driver
		if driver == "" {
			driver = "unbound (served Unhealthy until it is bound to vfio-pci again)"
		}
		fmt.Fprintf(b, "  vfio      %s, %s, %s\n  devices   %s\n", group, numa, driver, strings.Join(v.DevicePaths, " "))
	}
}

// writeVFIOResources writes the table of the plan's VFIO resources: their
// devices and the pciVendorSelector KubeVirt's permittedHostDevices lists
// them under.
func writeVFIOResources(b *strings.Builder, p *plan.Plan) {
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VFIO RESOURCE\tDEVICES\tPCIVENDORSELECTOR")
	for _, r := range p.VFIO {
		addrs := make([]string, len(r.Devices))
		var selectors []string
		for i, d := range r.Devices {
			addrs[i] = d.ID
			if d.VFIO == nil {
				continue
			}
			s := strings.ToUpper(d.VFIO.VendorID + ":" + d.VFIO.DeviceID)
			if !slices.Contains(selectors, s) {
				selectors = append(selectors, s)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, strings.Join(addrs, ","), strings.Join(selectors, ","))
	}
	_ = tw.Flush() // a strings.Builder does not fail
}

// vfioProblems reports whether a VFIO device is among the plan's problems.
func vfioProblems(p *plan.Plan) bool {
	for _, d := range p.Decisions {
		if d.Problem != "" && d.Kind == plan.DeviceVFIO {
			return true
		}
	}
	return false
}
