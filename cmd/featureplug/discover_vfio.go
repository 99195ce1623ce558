package main

import (
	"bytes"
	"fmt"

	"github.com/featureplug/featureplug/discovery"
)

// vfioSummary is what the table's first line adds for GPUs bound to
// vfio-pci: "" when there are none.
func vfioSummary(inv *discovery.Inventory) string {
	if len(inv.VFIO) == 0 {
		return ""
	}
	return fmt.Sprintf(", %d on vfio-pci", len(inv.VFIO))
}

// writeVFIOTable writes the GPUs bound to vfio-pci: address, product,
// PCI IDs, NUMA node, IOMMU group with its other devices, and driver.
func writeVFIOTable(b *bytes.Buffer, inv *discovery.Inventory) {
	if len(inv.VFIO) == 0 {
		return
	}
	b.WriteString("\nGPUs bound to vfio-pci (for virtual machines; NVML does not see them):\n")
	var rows bytes.Buffer
	rows.WriteString("PCI\tPRODUCT\tID\tNUMA\tIOMMU GROUP\tDRIVER\tDEVICE NAME\n")
	for _, d := range inv.VFIO {
		group := "none (no IOMMU)"
		if d.IOMMUGroup != discovery.NoIOMMUGroup {
			group = fmt.Sprint(d.IOMMUGroup)
		}
		driver := d.Driver
		if driver == "" {
			driver = "none (driver_override " + d.DriverOverride + ")"
		}
		fmt.Fprintf(&rows, "%s\t%s\t%s:%s\t%s\t%s\t%s\t%s\n", d.PCIAddress, d.Product, d.VendorID, d.DeviceID,
			numaString(d.NUMANode), group, driver, d.DeviceName)
		for _, m := range d.GroupMembers {
			mdriver := m.Driver
			if mdriver == "" {
				mdriver = "none"
			}
			fmt.Fprintf(&rows, "  %s\tclass %s, same IOMMU group\t%s:%s\t\t\t%s\n", m.Address, m.Class, m.VendorID, m.DeviceID, mdriver)
		}
	}
	b.WriteString(aligned(rows.String()))
}
