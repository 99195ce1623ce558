package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// topInits is how many of the costliest package inits a round keeps.
const topInits = 5

// InitCost is the floor under the agent's start-up: what any run of the
// binary pays before main does anything.
type InitCost struct {
	// VersionMs is the wall time of `featureplug version`, fork to exit,
	// and VersionCPUMs the CPU (user + system, all threads) it used.
	VersionMs    float64 `json:"versionMs"`
	VersionCPUMs float64 `json:"versionCpuMs"`
	// PackageInitMs sums the package initializers' clock time reported by
	// GODEBUG=inittrace=1.
	PackageInitMs float64 `json:"packageInitMs"`
	// Top are the costliest package initializers.
	Top []PackageInit `json:"top"`
}

// PackageInit is one package initializer's clock time.
type PackageInit struct {
	Package string  `json:"package"`
	Ms      float64 `json:"ms"`
}

// initLine matches a GODEBUG=inittrace=1 line:
// "init k8s.io/api/core/v1 @12 ms, 0.63 ms clock, 393216 bytes, 1520 allocs".
var initLine = regexp.MustCompile(`^init (\S+) @[0-9.]+ ms, ([0-9.]+) ms clock`)

// measureInit runs `binary version` twice: once timed, once with
// GODEBUG=inittrace=1 to see what the package initializers cost.
func measureInit(ctx context.Context, binary string) (InitCost, error) {
	var c InitCost
	cmd := exec.CommandContext(ctx, binary, "version")
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return c, fmt.Errorf("%s version: %w: %s", binary, err, out)
	}
	c.VersionMs = ms(time.Since(t0))
	c.VersionCPUMs = ms(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime())

	cmd = exec.CommandContext(ctx, binary, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return c, fmt.Errorf("GODEBUG=inittrace=1 %s version: %w: %s", binary, err, stderr.String())
	}
	inits, err := parseInitTrace(stderr.Bytes())
	if err != nil {
		return c, fmt.Errorf("GODEBUG=inittrace=1 %s version: %w", binary, err)
	}
	for _, p := range inits {
		c.PackageInitMs += p.Ms
	}
	c.Top = inits[:min(topInits, len(inits))]
	return c, nil
}

// parseInitTrace returns the package inits of an inittrace log, costliest
// first.
func parseInitTrace(log []byte) ([]PackageInit, error) {
	var out []PackageInit
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		m := initLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("init of %s: clock %q is not a number", m[1], m[2])
		}
		out = append(out, PackageInit{Package: m[1], Ms: v})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no \"init <package> ...\" lines on stderr")
	}
	slices.SortStableFunc(out, func(a, b PackageInit) int { return cmp.Compare(b.Ms, a.Ms) })
	return out, nil
}
