package labeler

// LabelNVMLUnavailable marks a node whose NVML fails (every call answers an
// error: a driver unloaded or hung, every GPU lost): "true" while it lasts,
// absent otherwise. The agent then advertises every device of those GPUs
// Unhealthy; an admin or a node remediation controller selects such nodes
// by it (kubectl get nodes -l featureplug.io/nvml-unavailable). It is
// published through the NodeFeature like every other label, so it needs
// no permission on Nodes.
const LabelNVMLUnavailable = "featureplug.io/nvml-unavailable"
