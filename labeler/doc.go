// Package labeler turns what discovery found into node labels and publishes
// them, together with the NFD features, for Node Feature Discovery.
//
// The package has three parts that do not depend on each other's state:
//
//   - Labels, a pure function of an Inventory and a Plan, computes labels with
//     gpu-feature-discovery's names and value formats (nvidia.com/gpu.product,
//     nvidia.com/gpu.count, nvidia.com/cuda.driver-version.major, ...), so
//     nodeSelectors written for gpu-feature-discovery keep working.
//   - Publishers write a Content (features + labels) somewhere: a NodeFeature
//     object through the API server (NodeFeaturePublisher), an nfd-worker
//     feature file (FilePublisher), or any io.Writer for dry runs
//     (WriterPublisher). Each writes only when the content changed.
//   - Loop (and Run) publishes every new Content and resyncs periodically,
//     retrying failures with capped exponential backoff, until its context
//     ends.
//
// Sink is the agent's output over them: the content of each (inventory,
// plan) to the publisher through a Loop, kept for /debug/content, with the
// NodeFeature's annotations of what the agent serves (served.go: the
// rules digest, the served resources, whether MPS daemons can start).
//
// See README.md in this directory for the label reference and the choices
// made for heterogeneous nodes.
package labeler
