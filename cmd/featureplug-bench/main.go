// Command featureplug-bench measures the featureplug agent as the kubelet
// sees it: it serves the kubelet's registration socket in a temporary
// directory, launches `featureplug run` on a fake node itself, and times
// start-up, allocation calls, health events and kubelet restarts over the
// real device-plugin sockets, with the agent's memory, idle CPU and
// feature-file writes. It prints a table of the medians over rounds next to
// the project's goals and can write every measurement as JSON.
//
// It is a project tool for `make bench`, not part of the agent's image.
// See docs/performance.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "featureplug-bench:", err)
		}
		os.Exit(2)
	}
}

// run is the command: it parses args, measures and reports.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("featureplug-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var output, jsonFile string
	var quietLog bool
	fs.StringVar(&cfg.Binary, "featureplug", "bin/featureplug", "the featureplug binary to launch")
	fs.StringVar(&cfg.NullPlugin, "null-plugin", "", "the null plugin binary (go build ./cmd/featureplug-bench/nullplugin), measured beside featureplug in every round as the floor")
	fs.StringVar(&cfg.FakeNode, "fake-node", "dgx-h100", "fake node of the agent: a bundled name or a YAML file")
	fs.StringVar(&cfg.Rules, "rules", "mixed", "rules of the agent: a builtin name or a file")
	fs.IntVar(&cfg.Rounds, "rounds", 5, "agent launches to measure; figures are medians over them")
	fs.IntVar(&cfg.Allocs, "allocs", 1000, "calls per Allocate and GetPreferredAllocation latency figure")
	fs.DurationVar(&cfg.Idle, "idle", 2*time.Second, "window over which idle CPU is measured")
	fs.DurationVar(&cfg.Quiet, "quiet", 2*time.Second, "window of the no-change feature-file check")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "longest wait for any one thing the agent should do")
	fs.StringVar(&output, "o", "table", "output on stdout: table or json")
	fs.StringVar(&jsonFile, "json", "", "also write the JSON document to this file")
	fs.BoolVar(&quietLog, "q", false, "no progress lines on stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: featureplug-bench [flags]\n\n"+
			"Launches `featureplug run` on a fake node against a simulated kubelet and\n"+
			"measures it through the device-plugin sockets. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags only)", fs.Args())
	}
	if output != "table" && output != "json" {
		return fmt.Errorf("-o: %q is not an output (use table or json)", output)
	}
	if !quietLog {
		cfg.Progress = stderr
	}

	b, err := newBench(ctx, cfg)
	if err != nil {
		return err
	}
	load := loadAverage()
	rounds, err := b.run(ctx)
	if err != nil {
		return err
	}
	machine := describeMachine(ctx, b.cfg.Binary, load)
	machine.MemoryCgroup = b.memoryCgroupLine()
	report := newReport(b.cfg, machine, b.plan, rounds)
	if jsonFile != "" {
		if err := writeJSONFile(jsonFile, report); err != nil {
			return err
		}
	}
	if output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return writeTable(stdout, report)
}

// writeJSONFile writes the report to path.
func writeJSONFile(path string, r Report) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("--json %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
