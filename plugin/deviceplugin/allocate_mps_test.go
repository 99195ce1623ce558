package deviceplugin

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAllocateMPSOneReplica checks that a container asking for more than
// one replica of an MPS resource is refused, as NVIDIA's device plugin
// forces failRequestsGreaterThanOne for MPS, even when the plan does not
// set the flag; one replica is served with the shared /dev/shm.
func TestAllocateMPSOneReplica(t *testing.T) {
	o, err := DefaultOptions().withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	res := mixedResources()["mps"]
	if res.Sharing.FailRequestsGreaterThanOne {
		t.Fatal("test resource sets failRequestsGreaterThanOne; the strategy must force it")
	}
	ds := newDeviceSet(res, nvlinkGroups(8, 4))
	for _, ids := range [][]string{{replicaID(6, 0), replicaID(7, 1)}, {replicaID(7, 0), replicaID(7, 1)}} {
		_, err := ds.containerResponse(ids, &o)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "failRequestsGreaterThanOne") {
			t.Errorf("Allocate(%v) = %v, want InvalidArgument naming failRequestsGreaterThanOne", ids, err)
		}
	}
	resp, err := ds.containerResponse([]string{replicaID(6, 3)}, &o)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range resp.GetMounts() {
		if m.GetContainerPath() == "/dev/shm" && m.GetHostPath() == o.MPSLayout().ShmDir() && !m.GetReadOnly() {
			found = true
		}
	}
	if !found {
		t.Errorf("mounts = %v, want %s at /dev/shm, writable", mounts(resp.GetMounts()), o.MPSLayout().ShmDir())
	}
}
