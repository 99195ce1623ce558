package draclass_test

import (
	"fmt"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
)

// A rule's NFD match becomes the CEL selector of its resource's class; a
// later rule's class leaves out what the earlier one claims.
func ExampleCompileCatalog() {
	rs, err := rules.Parse("example.yaml", []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: big
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      memory: {op: Gt, value: ["70000"]}
  resource: example.com/big-gpu
- name: rest
  devices: gpu
  resource: example.com/gpu
`))
	if err != nil {
		panic(err)
	}
	res, err := draclass.CompileCatalog(rs)
	if err != nil {
		panic(err)
	}
	for _, c := range res.Classes {
		fmt.Printf("%s (%s):\n  %s\n", c.Name, *c.Object.Spec.ExtendedResourceName, c.Selector)
	}
	// Output:
	// big-gpu.example.com.featureplug.io (example.com/big-gpu):
	//   device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].type == "gpu" && !device.attributes["gpu.featureplug.io"].migEnabled && device.capacity["gpu.featureplug.io"].memory.compareTo(quantity("70000Mi")) > 0
	// gpu.example.com.featureplug.io (example.com/gpu):
	//   device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].type == "gpu" && !device.attributes["gpu.featureplug.io"].migEnabled && !(device.capacity["gpu.featureplug.io"].memory.compareTo(quantity("70000Mi")) > 0)
}
