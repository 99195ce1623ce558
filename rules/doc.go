// Package rules turns a node's devices into extended resources with rules
// that admins write in Node Feature Discovery's match language.
//
// A rules file is YAML:
//
//	apiVersion: featureplug.io/v1alpha1
//	kind: ResourceRules
//	rules:
//	- name: h100-shared            # names the rule in plans and explanations
//	  devices: gpu                 # gpu: whole GPUs with MIG disabled; mig: MIG devices; vfio: GPUs bound to vfio-pci
//	  nodeSelector:                # optional, on the node's labels
//	    matchLabels: {pool: inference}
//	  matchFeatures:               # optional, as in an NFD NodeFeatureRule
//	  - feature: nvidia.gpu
//	    matchExpressions:
//	      product: {op: InRegexp, value: ["H100"]}
//	  matchAny: []                 # optional, as in an NFD NodeFeatureRule
//	  resource: nvidia.com/h100    # the extended resource name, or a template
//	  sharing:                     # optional; none when absent
//	    strategy: time-slicing     # none, time-slicing or mps
//	    replicas: 4                # required for time-slicing and mps
//	    failRequestsGreaterThanOne: true  # default false; mps forces true
//	    mps:                       # only with strategy mps; 0 or absent: default
//	      pinnedMemoryLimitMiB: 0      # 0..16777216 MiB per replica; 0: GPU memory / replicas
//	      activeThreadPercentage: 0    # 0..100 per replica; 0: 100 / replicas
//	  serve: device-plugin         # optional: device-plugin or dra; absent: the agent's --serve
//
// A file without rules is an error unless it says, at the top level,
// serveNothing: true (and then it has no rules): an emptied or truncated
// file must never pass for one that means to serve nothing. A plan of such
// a file has plan.Plan.ServeNothing set.
//
// # Evaluation
//
// Every device is decided on its own. A rule sees the node-level features
// nvidia.driver (attributes) and nvidia.capabilities (flags), and exactly one
// instance of the device's feature: nvidia.gpu for a whole GPU; nvidia.mig
// for a MIG device, whose parent GPU is then the one nvidia.gpu instance;
// nvidia.vfio for a GPU bound to vfio-pci for virtual machines, whose
// resource goes to Plan.VFIO, is never shared, and is refused when its
// IOMMU group cannot be passed through (vfio.go). The
// features are those of discovery.Features, so rules match what
// `kubectl get nodefeature` shows. The matchers are evaluated by NFD's own
// package (sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule)
// and mean exactly what they mean in a NodeFeatureRule.
//
// Rules are tried in order and the first that matches a device claims it. A
// device that no rule claims is not advertised. A Plan records, for every
// device, the rule that claimed it and why each earlier rule did not.
//
// # Templates
//
// A resource that contains "{{" is a Go text/template executed on the
// device's attributes (for a MIG device these include parent.*). Dotted
// attribute names are reached with index, {{ index . "compute.major" }}, or
// with the dots replaced by underscores, {{ .compute_major }}. The functions
// are lower, upper, replace OLD NEW, trimPrefix PREFIX, trimSuffix SUFFIX and
// resourceName, which turns any text into a valid name part
// ("NVIDIA A100-SXM4-40GB" becomes "nvidia-a100-sxm4-40gb"):
//
//	resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
//	resource: 'example.com/{{ .product | trimPrefix "NVIDIA " | resourceName }}'
//
// Templates may branch ({{if}}, {{with}}) but not loop ({{range}}) nor
// define or call other templates, and their output is capped at 1024 bytes.
//
// # Validation
//
// Parse reports every problem at once, each naming the file, line, rule
// (index and name), field and value: no rules without serveNothing,
// unknown fields, invalid resource names
// (see plan.ValidateResourceName), malformed NFD expressions, expressions that
// cannot compare what featureplug publishes (Gt on a product name), bad
// sharing settings (any sharing of devices: vfio), one resource given two
// sharing settings or two serves on the same nodes (serve.go), one literal
// resource given to containers and to VMs, and an unknown serve. Matching on
// a feature or attribute featureplug never publishes is a warning. Plan
// reports names a template makes invalid for a device, any device that
// would be advertised twice, and one resource given two serves on a node.
//
// # Health
//
// A health section gives node pools their own health policy: what each XID
// (per XID, or per resolution of NVIDIA's XID catalog) and each other kind
// of health event does to a device, the quiet periods, and whether devices
// are unhealthy while NVML fails. The first entry whose nodeSelector
// selects a node is its policy, carried on its Plan as a
// discovery.HealthPolicy (applied with discovery.Decide):
//
//	health:
//	- name: inference
//	  nodeSelector: {matchLabels: {pool: inference}}
//	  xids: {94: until-quiet}            # none, count, until-quiet, until-reset, until-reboot
//	  resolutions: {RESET_GPU: until-reboot}
//	  events: {ecc-volatile-double-bit: none}
//	  quietPeriod: 10m
//
// The builtin files (BuiltinNames) reproduce NVIDIA's device plugin
// strategies as rules: none (the Default), single and mixed, plus per-model,
// an example of per-model names and sharing.
package rules
