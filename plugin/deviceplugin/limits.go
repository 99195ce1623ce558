package deviceplugin

import (
	"fmt"
	"strings"
)

// Request limits of the device-plugin servers.
const (
	// maxRequestBytes caps the size of one gRPC request to a plugin
	// server. The biggest legitimate request is a GetPreferredAllocation
	// listing every available device ID of a resource: with IDs of up to
	// ~60 bytes (a MIG UUID and a replica suffix) and protobuf framing,
	// 1 MiB holds more than 12,000 IDs, far more than any node has logical
	// devices (the rules' caps on replicas and devices per node keep a plan
	// well below that). gRPC answers a larger request with
	// ResourceExhausted before it is decoded.
	maxRequestBytes = 1 << 20
	// maxNamedIDs is how many device IDs an error names; the rest are
	// only counted.
	maxNamedIDs = 5
	// maxIDBytes is how much of one device ID an error quotes.
	maxIDBytes = 64
	// maxListAndWatchStreams bounds the ListAndWatch streams one server
	// keeps open at once. The kubelet opens one per registration and ends
	// it before the next; the margin covers a kubelet that re-registers
	// while its old stream has not ended yet, and a tool watching beside
	// it. Each open stream costs goroutines and buffers for as long as the
	// client keeps it, read or not: a stream over the bound is refused at
	// once with ResourceExhausted.
	maxListAndWatchStreams = 8
)

// idList describes n device IDs, of which ids holds the first few, for an
// error message without echoing all of them: at most maxNamedIDs IDs, each
// cut to maxIDBytes, and the count when some are left out. what names the
// kind of IDs. For example:
//
//	unknown device IDs "a", "b"
//	12 unknown device IDs, e.g. "a", "b", "c", "d", "e"
func idList(what string, ids []string, n int) string {
	var b strings.Builder
	if n > maxNamedIDs {
		fmt.Fprintf(&b, "%d %s device IDs, e.g. ", n, what)
	} else {
		fmt.Fprintf(&b, "%s device IDs ", what)
	}
	for i, id := range ids[:min(len(ids), maxNamedIDs)] {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(id) > maxIDBytes {
			id = id[:maxIDBytes] + "..."
		}
		fmt.Fprintf(&b, "%q", id)
	}
	return b.String()
}

// idSample collects up to maxNamedIDs IDs and counts all of them.
type idSample struct {
	ids []string
	n   int
}

// add records one ID.
func (s *idSample) add(id string) {
	if len(s.ids) < maxNamedIDs {
		s.ids = append(s.ids, id)
	}
	s.n++
}

// describe describes the sample as idList does.
func (s *idSample) describe(what string) string { return idList(what, s.ids, s.n) }
