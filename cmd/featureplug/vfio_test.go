package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

const kubevirtRules = "../../manifests/examples/rules/kubevirt.yaml"

// checkVFIOGolden compares out with testdata/vfio/<name>.golden, or
// rewrites it with -update (the package's flag, readme_test.go).
func checkVFIOGolden(t *testing.T, name, out string) {
	t.Helper()
	path := filepath.Join("testdata", "vfio", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/featureplug -run %s -update writes it)", err, t.Name())
	}
	if out != string(want) {
		t.Errorf("%s differs from %s (go test ./cmd/featureplug -run %s -update rewrites it):\n%s", name, path, t.Name(), out)
	}
}

// withoutHealth cuts an explanation before its health policy, which
// follows the XID catalog rather than VFIO.
func withoutHealth(out string) string {
	before, _, _ := strings.Cut(out, "\nHealth policy:")
	return before + "\n"
}

// TestVFIOGoldens pins what discover and rules explain show of the bundled
// l40s-vfio node (four L40S on nvidia, four on vfio-pci, one IOMMU group
// shared with an audio function) with one rules file for both kinds.
func TestVFIOGoldens(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"discover", []string{"discover", "--fake-node", "l40s-vfio"}},
		{"explain", []string{"rules", "explain", "--rules", kubevirtRules, "--fake-node", "l40s-vfio"}},
		{"explain-vdi", []string{"rules", "explain", "--rules", kubevirtRules, "--fake-node", "l40s-vfio", "--node-labels", "example.com/pool=vdi"}},
		{"explain-dra", []string{"rules", "explain", "--dra", "--rules", kubevirtRules, "--fake-node", "l40s-vfio"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execute(t, tt.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if tt.name != "discover" {
				out = withoutHealth(out)
			}
			checkVFIOGolden(t, tt.name, out)
		})
	}
}

// hostTree lays out the sysfs tree of the bundled l40s-vfio node in a
// directory, as a host's --sysfs-root; without nvidia, its four NVML GPUs
// lose their driver, as on a host where the NVIDIA driver is not loaded.
func hostTree(t *testing.T, nvidia bool) string {
	t.Helper()
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	if !nvidia {
		for _, addr := range []string{"0000:07:00.0", "0000:17:00.0", "0000:27:00.0", "0000:37:00.0"} {
			if err := os.Remove(filepath.Join(root, "sys/bus/pci/devices", addr, "driver")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// TestVFIOWithoutDriver checks that a node whose GPUs are all bound to
// vfio-pci is discovered and planned without an NVIDIA driver, and that a
// node with GPUs on nvidia still fails without NVML, naming them.
func TestVFIOWithoutDriver(t *testing.T) {
	noNVML := filepath.Join(t.TempDir(), "libnvidia-ml.so.1") // does not exist
	root := hostTree(t, false)
	out, err := execute(t, "discover", "--sysfs-root", root, "--nvml-library", noNVML)
	if err != nil {
		t.Fatalf("discover without a driver: %v\n%s", err, out)
	}
	for _, want := range []string{"No NVIDIA driver (NVML not read): 0 GPUs, 4 on vfio-pci", "0000:47:00.0    NVIDIA L40S", "nvidia.vfio: 4 instances"} {
		if !strings.Contains(out, want) {
			t.Errorf("discover output lacks %q:\n%s", want, out)
		}
	}
	out, err = execute(t, "rules", "explain", "--sysfs-root", root, "--nvml-library", noNVML)
	if err != nil {
		t.Fatalf("rules explain without a driver: %v\n%s", err, out)
	}
	if !strings.Contains(out, "nvidia.com/AD102GL_L40S  0000:47:00.0,0000:57:00.0,0000:67:00.0,0000:77:00.0  10DE:26B9") {
		t.Errorf("the builtin rules do not name the VFIO GPUs as KubeVirt does:\n%s", out)
	}
	if strings.Contains(out, "warning:") {
		t.Errorf("a plan of VFIO devices alone gets a warning (run would refuse it):\n%s", out)
	}
	out, err = execute(t, "discover", "-o", "labels", "--sysfs-root", root, "--nvml-library", noNVML)
	if err != nil || out != "featureplug.io/vfio.count=4\nfeatureplug.io/vfio.product=NVIDIA-L40S\n" {
		t.Errorf("labels without a driver: %v\n%q", err, out)
	}

	_, err = execute(t, "discover", "--sysfs-root", hostTree(t, true), "--nvml-library", noNVML)
	if err == nil || !strings.Contains(err.Error(), "GPUs 0000:07:00.0, 0000:17:00.0, 0000:27:00.0, 0000:37:00.0 are bound to the nvidia driver and need NVML") {
		t.Errorf("GPUs on nvidia without NVML: %v, want the NVML error naming them", err)
	}
	_, err = execute(t, "discover", "--sysfs-root", t.TempDir(), "--nvml-library", noNVML)
	if err == nil || !strings.Contains(err.Error(), noNVML) {
		t.Errorf("no GPUs and no NVML: %v, want the NVML error", err)
	}
}

// TestVFIOFakeSysfsRoot checks that --sysfs-root with --fake-node is
// where the fake node lays out its tree.
func TestVFIOFakeSysfsRoot(t *testing.T) {
	root := t.TempDir()
	if out, err := execute(t, "discover", "--fake-node", "l40s-vfio", "--sysfs-root", root); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	target, err := os.Readlink(filepath.Join(root, "sys/bus/pci/devices/0000:47:00.0/driver"))
	if err != nil || filepath.Base(target) != "vfio-pci" {
		t.Errorf("the fake tree in --sysfs-root: driver link %q, %v; want vfio-pci", target, err)
	}
}
