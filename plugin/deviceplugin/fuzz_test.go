package deviceplugin

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/featureplug/featureplug/rules/plan"
)

// maxErrorBytes bounds every error message of the request handlers,
// whatever the request holds.
const maxErrorBytes = 2048

// fuzzSets are the device sets the fuzz targets choose from: whole GPUs,
// replicas and MIG devices, each with some devices Unhealthy or none.
func fuzzSets() []*deviceSet {
	ts := replicaResource()
	ts.Sharing.Replicas = 4
	one := ts
	one.Sharing.FailRequestsGreaterThanOne = true
	return []*deviceSet{
		newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], nvlinkGroups(8, 4)),
		newDeviceSet(ts, nvlinkGroups(8, 4)),
		newDeviceSet(one, nvlinkGroups(8, 4)),
		newDeviceSet(plan.Resource{Name: "nvidia.com/mig", Devices: []plan.Device{migDevice(0, 0), migDevice(0, 1), migDevice(1, 0)}}, nil),
	}
}

// fuzzIDs turns the fuzzer's bytes into a list of device IDs: each byte
// picks a logical ID of ds (or, for high values, a made-up one), so most
// lists are plausible and some hold unknown or repeated IDs.
func fuzzIDs(ds *deviceSet, b []byte, extra string) []string {
	out := make([]string, 0, len(b))
	for _, c := range b {
		switch {
		case int(c) < len(ds.logical):
			out = append(out, ds.logical[c].id)
		case c == 255:
			out = append(out, extra)
		default:
			out = append(out, ds.logical[int(c)%len(ds.logical)].id+"x")
		}
	}
	return out
}

// fuzzBad marks physical devices unhealthy from a bit mask.
func fuzzBad(ds *deviceSet, mask uint8) []bool {
	_, bad, _ := ds.apiDevices(func(d *plan.Device) bool {
		for i := range ds.physical {
			if &ds.physical[i] == d {
				return mask&(1<<(i%8)) != 0
			}
		}
		return false
	})
	return bad
}

func FuzzAllocate(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1}, uint8(0), "")
	f.Add(uint8(0), []byte{0, 0}, uint8(0), "")
	f.Add(uint8(0), []byte{2, 3}, uint8(4), "")
	f.Add(uint8(1), []byte{0, 5, 9, 31}, uint8(0), "")
	f.Add(uint8(2), []byte{0, 5}, uint8(0), "")
	f.Add(uint8(3), []byte{255, 255, 255, 255, 255, 255, 255}, uint8(0), strings.Repeat("x", 300))
	f.Add(uint8(0), []byte{}, uint8(0), "")
	sets := fuzzSets()
	o, err := Options{DeviceListStrategies: []DeviceListStrategy{DeviceListEnvVar, DeviceListVolumeMounts, DeviceListCDICRI, DeviceListCDIAnnotations}}.withDefaults()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, which uint8, picks []byte, mask uint8, extra string) {
		ds := sets[int(which)%len(sets)]
		ids := fuzzIDs(ds, picks, extra)
		bad := fuzzBad(ds, mask)
		resp, err := ds.allocate(ids, &o, bad)
		if err != nil {
			if len(err.Error()) > maxErrorBytes {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			switch status.Code(err) {
			case codes.InvalidArgument, codes.FailedPrecondition:
			default:
				t.Fatalf("unexpected code: %v", err)
			}
			return
		}
		// Success: every ID known, none repeated, none unhealthy.
		seen := map[string]bool{}
		for _, id := range ids {
			i, ok := ds.byID[id]
			if !ok || seen[id] {
				t.Fatalf("accepted unknown or repeated ID %q in %q", id, ids)
			}
			seen[id] = true
			if bad != nil && bad[ds.logical[i].phys] {
				t.Fatalf("accepted unhealthy device %q", id)
			}
		}
		if len(ids) == 0 || resp.GetEnvs()[EnvVisibleDevices] == "" {
			t.Fatalf("response %v for %q", resp, ids)
		}
	})
}

func FuzzGetPreferredAllocation(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 2, 3, 4, 5, 6, 7}, []byte{}, 4, uint8(0), "")
	f.Add(uint8(0), []byte{0, 1, 2, 3}, []byte{0}, 2, uint8(1), "")
	f.Add(uint8(0), []byte{0, 1, 2, 3}, []byte{}, 3, uint8(3), "")
	f.Add(uint8(1), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte{4}, 5, uint8(2), "")
	f.Add(uint8(3), []byte{0, 1, 2, 255}, []byte{}, 1, uint8(0), "GPU-nope")
	f.Add(uint8(0), []byte{0, 0, 1}, []byte{1, 1}, 2, uint8(0), "")
	f.Add(uint8(0), []byte{0}, []byte{}, -3, uint8(0), "")
	sets := fuzzSets()
	f.Fuzz(func(t *testing.T, which uint8, avail, must []byte, size int, mask uint8, extra string) {
		ds := sets[int(which)%len(sets)]
		available := fuzzIDs(ds, avail, extra)
		mustInclude := fuzzIDs(ds, must, extra)
		bad := fuzzBad(ds, mask)
		for _, policy := range []ReplicaPolicy{ReplicasDistributed, ReplicasPacked} {
			got, err := ds.pick(available, mustInclude, size, policy, bad)
			if err != nil {
				if len(err.Error()) > maxErrorBytes {
					t.Fatalf("error of %d bytes", len(err.Error()))
				}
				switch status.Code(err) {
				case codes.InvalidArgument, codes.FailedPrecondition:
				default:
					t.Fatalf("unexpected code: %v", err)
				}
				continue
			}
			if len(got) != size {
				t.Fatalf("%d devices for size %d", len(got), size)
			}
			inAvail := map[string]bool{}
			for _, id := range available {
				inAvail[id] = true
			}
			inMust := map[string]bool{}
			for _, id := range mustInclude {
				inMust[id] = true
			}
			seen := map[string]bool{}
			for _, id := range got {
				if !inAvail[id] || seen[id] {
					t.Fatalf("preferred %q: not available or repeated (available %q)", id, available)
				}
				seen[id] = true
				if i := ds.byID[id]; bad != nil && bad[ds.logical[i].phys] && !inMust[id] {
					t.Fatalf("preferred unhealthy %q", id)
				}
			}
			for id := range inMust {
				if !seen[id] {
					t.Fatalf("must-include %q left out of %q", id, got)
				}
			}
		}
	})
}
