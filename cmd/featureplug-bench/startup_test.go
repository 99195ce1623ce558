package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/featureplug/featureplug/cmd/internal/agent"
	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/rulesengine"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules"
)

// BenchmarkAgentStartup runs the agent in-process from an opened fake node
// to every resource registered and listed, which is the part of
// `featureplug run`'s start-up after the process and its packages are
// initialized. Profile it with
//
//	go test -run '^$' -bench AgentStartup -cpuprofile cpu.out ./cmd/featureplug-bench
func BenchmarkAgentStartup(b *testing.B) {
	for _, node := range []string{"dgx-h100", "dgx-a100"} {
		b.Run(node, func(b *testing.B) {
			want := plannedResources(b, node, "mixed")
			for b.Loop() {
				startAgentOnce(b, node, "mixed", want)
			}
		})
	}
}

// plannedResources returns how many resources the rules make of node.
func plannedResources(b *testing.B, node, rulesName string) int {
	src, err := gpusource.OpenFake(node)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	inv, _, err := src.Discover()
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rules.Load(rulesName)
	if err != nil {
		b.Fatal(err)
	}
	plan, err := rs.Plan(inv, nil)
	if err != nil {
		b.Fatal(err)
	}
	return len(plan.Resources)
}

// startAgentOnce starts an agent on node with rules against a fresh
// simulated kubelet, waits until the want resources of the first plan are
// registered and listed, and stops it (untimed).
func startAgentOnce(b *testing.B, node, rulesName string, want int) {
	b.StopTimer()
	dir, err := os.MkdirTemp("", "fpb")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	k, err := kubeletsim.Start(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer k.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.StartTimer()

	src, err := gpusource.OpenFake(node)
	if err != nil {
		b.Fatal(err)
	}
	opts := deviceplugin.DefaultOptions()
	opts.KubeletDir = dir
	a, err := agent.New(agentconfig.Config{
		NodeName:    node,
		Source:      src,
		Rules:       rulesName,
		RulesEngine: rulesengine.New(),
		Publish:     labeler.PublishNone,
		Plugin:      opts,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() { done <- a.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	err = k.WaitUntil(wctx, func() bool { return len(k.Resources()) == want && allListed(k) })
	wcancel()

	b.StopTimer()
	cancel()
	if rerr := <-done; rerr != nil {
		b.Errorf("agent: %v", rerr)
	}
	src.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
}

// allListed reports whether every registered resource sent a device list.
func allListed(k *kubeletsim.Kubelet) bool {
	for _, res := range k.Resources() {
		if k.Updates(res) == 0 {
			return false
		}
	}
	return true
}
