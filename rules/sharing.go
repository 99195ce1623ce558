package rules

import (
	"fmt"
	"strings"
)

// sharingKey is a comparable form of Sharing, to tell whether two rules
// share a resource's devices the same way.
type sharingKey struct {
	strategy SharingStrategy
	replicas int
	failGT1  bool
	pinned   uint64
	threads  int
}

func (s Sharing) key() sharingKey {
	k := sharingKey{strategy: s.Strategy, replicas: s.Replicas, failGT1: s.FailRequestsGreaterThanOne}
	if k.strategy == "" {
		k.strategy = SharingNone
	}
	if k.replicas == 0 {
		k.replicas = 1
	}
	if s.MPS != nil {
		k.pinned, k.threads = s.MPS.PinnedMemoryLimitMiB, s.MPS.ActiveThreadPercentage
	}
	return k
}

// String formats the sharing for tables and messages, e.g. "none",
// "time-slicing x4" or "mps x2 (20480 MiB, 50% threads)".
func (s Sharing) String() string {
	k := s.key()
	if k.strategy == SharingNone && k.replicas == 1 && !k.failGT1 {
		return string(SharingNone)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s x%d", k.strategy, k.replicas)
	var extra []string
	if k.pinned > 0 {
		extra = append(extra, fmt.Sprintf("%d MiB", k.pinned))
	}
	if k.threads > 0 {
		extra = append(extra, fmt.Sprintf("%d%% threads", k.threads))
	}
	if k.failGT1 {
		extra = append(extra, "failRequestsGreaterThanOne")
	}
	if len(extra) > 0 {
		b.WriteString(" (" + strings.Join(extra, ", ") + ")")
	}
	return b.String()
}
