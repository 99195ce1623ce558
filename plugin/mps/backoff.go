package mps

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// DefaultBackoff paces the restarts of a daemon that died or failed to
// start: 1 s, doubling after each further consecutive failure, capped at
// 1 min, no jitter.
var DefaultBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}
