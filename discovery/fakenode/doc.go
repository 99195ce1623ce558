// Package fakenode builds a fake GPU node from a YAML description: an
// nvml.Interface that answers as the described hardware would, so that
// discovery, go-nvlib and the health watcher run their real code paths
// without a GPU.
//
// # File format
//
//	name: dgx-a100              # node name (DNS subdomain); seeds the UUIDs
//	driverVersion: "570.86.15"  # SystemGetDriverVersion
//	cudaVersion: "12.8"         # SystemGetCudaDriverVersion -> 12080; quote it
//	gpus:                       # GPU indexes follow the order of the entries
//	  - product: A100-SXM4-40GB # a catalog key (see below)
//	    count: 4                # optional, default 1: repeats the entry
//	    numa: 0                 # optional, default 0; -1: NVML reports none
//	    mig:                    # optional; the key (even "mig: []") enables MIG mode
//	      - profile: 3g.20gb    # a GPU instance profile of the product
//	      - profile: 2g.10gb
//	        placement: 4        # optional start memory slice; default: chosen so the layout fits
//	      - profile: 1g.5gb
//	        count: 2            # optional, default 1
//	        computeInstances: [1] # optional compute instance sizes in slices; default one that fills it
//	  - product: A100-SXM4-40GB
//	    count: 4
//	    numa: 1
//	    health:                 # optional evidence of earlier failures NVML keeps
//	      rowRemapPending: true # GetRemappedRows isPending (row-remapping products)
//	      rowRemapFailed: false # GetRemappedRows failureOccurred
//	      retiredPagesPending: false # GetRetiredPagesPendingStatus (page-retiring products: L4, L40S)
//	      volatileDoubleBitErrors: 2 # GetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)
//	      recoveryAction: none  # FI_DEV_GET_GPU_RECOVERY_ACTION: none, gpu-reset, node-reboot, drain-p2p, ...
//	    mode: compute           # optional, default compute: GetPciInfoExt's PCI class (graphics: a VGA controller)
//	    fabric:                 # optional: attached to an NVLink multi-node fabric (GetGpuFabricInfo)
//	      clusterUUID: 7b968a6d-c8aa-45e1-9e07-e1e51be99c31
//	      cliqueID: 1
//	nvlink:                     # optional NVLink groups
//	  - gpus: [0, 1, 2, 3, 4, 5, 6, 7]
//	    links: 12               # lanes between every pair of the group
//	    nvswitch: true          # through NVSwitches: each GPU spends 12 lanes in all
//	pcie:                       # optional PCIe groups nearer than the NUMA default
//	  - gpus: [0, 1]
//	    level: PIX              # PIX, PXB, PHB, NODE or SYS
//	vfio:                       # optional GPUs bound to vfio-pci, which NVML does not see (vfio.go)
//	  - product: L40S           # a catalog key: its PCI device ID
//	    count: 2                # optional, default 1
//	    numa: 1                 # optional, default 0; -1: sysfs reports none
//	    audio: vfio-pci         # optional: the card's HD audio function in its IOMMU group, on this driver
//	    sharedGroup: false      # optional: the entry's GPUs in one IOMMU group (no ACS)
//
// Unknown fields, values of the wrong type, unknown products or profiles, MIG
// layouts the GPU cannot hold (more instances than a profile allows, more
// than 7 compute slices, or no free placement) and bad GPU indexes in groups
// are errors naming the file, the field path and the value, e.g.
//
//	dgx.yaml: gpus[0].mig[1].profile: "2g.99gb" is not a MIG profile of A100-SXM4-40GB (have 1g.5gb, ...)
//
// The node also has a sysfs of its own (Sysfs), which discovery reads
// for what NVML does not say: each GPU's PCIe root complex and NUMA node.
// GPUs of a PIX, PXB or PHB group share a root complex; every other GPU
// has one of its own ("pci0000:00" for GPU 0, "pci0000:10" for GPU 1, ...).
//
// Without an nvlink group, GPUs have no NVLink lanes connected. A direct
// group (nvswitch false) spends links lanes per peer, so it must fit the
// product's lanes (12 on A100, 18 on H100/H200/B200); DGX/HGX baseboards
// use nvswitch: true, and a node has at most one such group (one NVSwitch
// fabric, as on every real baseboard). Without a pcie group, two GPUs on
// the same NUMA node share a NODE ancestor, others SYS. Health evidence
// must match the product's memory: row remapping on A100, H100, H100 NVL,
// H200 and B200, page retirement on L4 and L40S.
//
// # Catalog
//
// A100-SXM4-40GB, A100-SXM4-80GB, H100-80GB-HBM3, H100-NVL, H200-141GB and
// B200 (MIG capable, NVLink) and L4 and L40S (PCIe only, no MIG), with the
// MIG profiles, instance limits, placements, memory sizes, SM and engine
// counts of NVIDIA's MIG user guide and real `nvidia-smi mig -lgip`
// listings; catalog.go names the source of every figure and marks the
// unverified ones. Memory sizes are those go-nvlib needs to derive the
// canonical profile names (1g.5gb ... 7g.40gb on an A100 40GB, 1g.18gb ...
// 7g.141gb on an H200, 1g.23gb ... 7g.180gb on a B200).
//
// # Bundled nodes
//
// dgx-a100, dgx-h100 (NVSwitch all-to-all NV18, each GPU behind its own
// PCIe switch, two NUMA nodes), hgx-b200 (NV18 all-to-all, GPU pairs behind
// PCIe switches), h100-nvl (two NVLink-bridged pairs, NV12), h200-mig,
// a100-80gb-mixed, l40s-pcie, l40s-vfio (eight L40S, four of them on
// vfio-pci) and workstation (one L4); each file's comment says which real
// machine it models and from what source.
//
// # GPUs on vfio-pci
//
// WriteSysfs lays out the node's PCI devices as a host's sysfs and /dev
// hold them, which discovery reads with --sysfs-root; SetVFIOState binds,
// unbinds or removes a VFIO GPU in every tree the node wrote, a fault for
// tests of device health (docs/hardware.md).
//
// # What the NVML answers
//
// UUIDs (GPU-..., MIG-...) are derived from the node name, GPU index and GPU
// and compute instance IDs, and PCI bus IDs from the GPU index, so loading
// the same file again gives the same devices. GPU instance IDs follow from
// the placement (the whole GPU is 0, the eighth slices 7-14), compute
// instance IDs count from 0 in each GPU instance, and MIG device indexes
// follow GPU instance then compute instance ID. A MIG device created at run
// time gets a UUID of its own: one created again at the same place is a
// new device, as on real GPUs.
//
// # MIG at run time
//
// MIG profiles and placements come from discovery/migplace's table. GPU
// and compute instances are created and destroyed with nvml.h's answers:
// ERROR_INSUFFICIENT_RESOURCES for an occupied placement or a profile
// with no instance left, ERROR_INVALID_ARGUMENT for a placement the
// profile lacks, ERROR_NOT_SUPPORTED with MIG mode disabled, ERROR_IN_USE
// for a GPU instance with compute instances or a MIG device a process runs
// on (Node.SetInUse). SetMigMode changes the mode at once on an idle GPU
// and leaves it pending (activationStatus ERROR_IN_USE) while a process
// holds the GPU; on Ampere the change is a GPU reset (ERROR_RESET_REQUIRED
// where the host cannot reset: Node.SetResetUnavailable), and an Ampere
// GPU with MIG disabled lists no GPU instance profile. ResetGPU activates
// a pending mode. Node.MIGInstances lists a GPU's instances for tests.
//
// The fake implements identity, memory, PCI (GetPciInfo, and GetPciInfoExt
// with the PCI class), NUMA, fabric registration (GetGpuFabricInfo), compute
// mode, MIG mode and
// MIG management (GPU and compute instance profiles, placements, creation
// with capacity enforced, destruction), MIG device handles and attributes,
// topology and NVLink (lanes to peer GPUs or to NVSwitches, link states
// also through GetFieldValues with FI_DEV_NVLINK_GET_STATE and
// FI_DEV_NVLINK_LINK_COUNT), failure evidence (GetRetiredPagesPendingStatus,
// GetRemappedRows, GetTotalEccErrors, and through GetFieldValues the GPU
// recovery action and each NVLink's recovery failures), and events
// (EventSetCreate, RegisterEvents, EventSet.Wait and Free). Every other method
// of nvml.Interface, nvml.Device, nvml.GpuInstance, nvml.ComputeInstance and
// nvml.EventSet returns ERROR_NOT_SUPPORTED with zero values. The library's
// handle-first functions (DeviceGetName(device), GpuInstanceGetInfo(gi),
// EventSetWait(set, timeout), ...) call the handle's method, as the real
// library does.
//
// The versioned-struct getters that return go-nvml handler values
// (GetGpuInstanceProfileInfoV, GetComputeInstanceProfileInfoV, ...) return
// zero handlers: their V1/V2/V3 methods call the real NVML library and must
// not be used with the fake. Use GetGpuInstanceProfileInfo and
// GetComputeInstanceProfileInfo, as go-nvlib does.
//
// Init and Shutdown always succeed and calls made without Init work: the
// fake keeps no library state.
//
// # Events
//
// Node.InjectXID, InjectMIGXID and InjectECCDoubleBit queue an event on every
// event set registered for that type on the GPU. EventSet.Wait returns as
// soon as an event is queued, whatever its timeout, as nvmlEventSetWait
// does on the real driver (NVIDIA's own fake NVML library hands a pending
// event over only when a wait times out, which adds up to one timeout of
// latency there). The event comes from the
// physical GPU's handle, with GpuInstanceId and ComputeInstanceId naming the
// MIG device, or 0xFFFFFFFF when it names none. Unlike real hardware, an
// event injected while no set listens for it is kept for the first set that
// registers for it, so tests need not wait for a watcher to start.
//
// # Faults
//
// The other failures NVML reports are played at run time: SetGPULost (the
// GPU falls off the bus: its health queries answer ERROR_GPU_IS_LOST, and
// an EventTypeGpuUnavailableError event comes), SetRecoveryAction (what
// the driver asks for after an error, with an EventTypeGpuRecoveryAction
// event), SetNVLinkDown (a link reads inactive and counts a failed
// recovery), SetHealth (the memory evidence appears or clears),
// InjectPageRetirementFailure (an EventTypeDramRetirementFailure event),
// and ResetGPU (nvidia-smi --gpu-reset: the action is none again, pending
// retirements and remappings take effect, the links come back). The driver
// logs an XID with most of these (79, 154, 64); a test injects it with
// InjectXID when it wants both.
package fakenode
